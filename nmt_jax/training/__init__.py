"""Training: research code.

steps (`TrainState`, the optimizer, the pure train and eval steps),
progress (metrics between log lines, divergence checks), plateau (learning
rate decay and early stopping) and preemption (SIGTERM at a step boundary).
"""
