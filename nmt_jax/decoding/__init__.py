"""Decoding and scoring a trained model: research code.

search (greedy and beam search, teacher forcing), scorers (one model or an
ensemble), evaluation (`Evaluator`: a split decoded and scored), metrics
(BLEU, chrF, RIBES), outputs (n-best lines, alignments) and restore (a
model or an ensemble from its workdirs).
"""
