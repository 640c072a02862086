"""Configs as data: the default config, its presets and its checks.

defaults (every field, documented), presets (what `configs/<name>.py:ARG`
names), validation (`resolve`: derived fields filled, every value checked),
compiler_options (XLA options for the compiled steps) and cli_flags (config
files and overrides on the command line: mistakes in one line).
"""
