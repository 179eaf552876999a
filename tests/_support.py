"""Helpers shared by several test modules."""

#: Prepended to a subprocess's code: makes ``import torch`` fail, as on a machine without torch.
BLOCK_TORCH = (
    "import sys, importlib.abc\n"
    "class _NoTorch(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ImportError('torch blocked by the test')\n"
    "sys.meta_path.insert(0, _NoTorch())\n"
    "for _m in [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]:\n"
    "    del sys.modules[_m]\n"
)
