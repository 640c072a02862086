"""Configs as data: the default config, its presets and its checks.

defaults (every field, documented), presets (what `configs/x.py:ARG` names),
validation (`resolve`: derived fields filled, every value checked) and
compiler_options (XLA options for the compiled steps).
"""
