"""Attention kinds behind one interface (base.py), one module per kind.

Importing this package imports every module in it, so each kind registers
itself; `kinds()` is then the one list of them. A new kind is one new module
here (or in any module imported before the config is built).
"""

import importlib
import pkgutil

from nmt_jax.attention import base

for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f'{__name__}.{_module.name}')

Attention = base.Attention
Cost = base.Cost
StepInputs = base.StepInputs
register = base.register
get = base.get
make = base.make
kinds = base.names
masked_softmax = base.masked_softmax
at_least_float32 = base.at_least_float32
computed_positions = base.computed_positions
source_weights = base.source_weights
default_config = base.default_config
validate = base.validate
