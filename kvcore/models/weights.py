"""Alias of :mod:`kvcore.deploy.weights` (GPU-fit planning moved to :mod:`kvcore.deploy`);
``import kvcore.models.weights`` gives that very module."""

import sys

from kvcore.deploy import weights as _module

sys.modules[__name__] = _module
