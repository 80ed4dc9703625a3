"""`fa4gen.interface` stands where `flash_attn.cute.interface` stands: engines that import FA4's
entry points from that module, `_flash_attn_fwd` beneath the public functions among them, switch
by changing the import. Every name here is the package's own."""
from . import _flash_attn_fwd, flash_attn_combine, flash_attn_func, flash_attn_varlen_func

__all__ = ["_flash_attn_fwd", "flash_attn_combine", "flash_attn_func", "flash_attn_varlen_func"]
