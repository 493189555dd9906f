"""Alias of :mod:`kvcore.deploy.gpus` (GPU-fit planning moved to :mod:`kvcore.deploy`);
``import kvcore.gpus`` gives that very module."""

import sys

from kvcore.deploy import gpus as _module

sys.modules[__name__] = _module
