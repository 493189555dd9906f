"""Alias of :mod:`kvcore.deploy.sweep` (GPU-fit planning moved to :mod:`kvcore.deploy`);
``import kvcore.sweep`` gives that very module."""

import sys

from kvcore.deploy import sweep as _module

sys.modules[__name__] = _module
