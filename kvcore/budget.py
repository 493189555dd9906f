"""Alias of :mod:`kvcore.deploy.budget` (GPU-fit planning moved to :mod:`kvcore.deploy`);
``import kvcore.budget`` gives that very module."""

import sys

from kvcore.deploy import budget as _module

sys.modules[__name__] = _module
