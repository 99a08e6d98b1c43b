"""The decode kernels' weights on 2 MB pages.

A decode step streams every weight the GGUF kernels read (the bundled
model: 178 MB of head, 71 MB of layers) from memory. On 4 KB pages that is
61,000 pages a step, each a TLB miss and a fresh start for the hardware
prefetchers, which stop at page boundaries; the head's product took 15-17%
longer than on 2 MB pages (measured on the bundled model, 1 and 8 rows).

Linux backs anonymous memory with 2 MB pages where the system allows it
(transparent huge pages "always", or "madvise" for memory that asks), but the
weights come from the weight cache's file maps or from torch's allocator, on
4 KB pages. `move_to_huge_pages` copies them into one anonymous arena that
asks for 2 MB pages, a tensor at a time, each source dropped once copied,
so the process holds at most one tensor twice. Elsewhere (another
OS, huge pages "never") the tensors stay where they are.
"""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import torch
from torch import nn

from inferd.arch.gguf_linear import GGUFLinear

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
ALIGN = 4096  # each tensor starts on a page of its own: the kernels' loads never straddle two tensors
_THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_available() -> bool:
    """Anonymous memory that asks gets 2 MB pages: "[always]" or "[madvise]" is the system's setting."""
    try:
        setting = _THP_SETTING.read_text()
    except OSError:
        return False
    return hasattr(mmap, "MADV_HUGEPAGE") and ("[always]" in setting or "[madvise]" in setting)


def move_to_huge_pages(slots: list[tuple[nn.Module, str]]) -> int:
    """Put each buffer `getattr(module, name)` (contiguous, on the CPU) into one
    arena on 2 MB pages, in order, each source dropped once copied. Returns
    the bytes moved: 0 where the system gives no huge pages."""
    if not slots or not huge_pages_available():
        return 0
    offsets, size = [], 0
    for module, name in slots:
        offsets.append(size)
        size += -(-getattr(module, name).nbytes // ALIGN) * ALIGN
    # A huge page more than needed, so that the arena can start on a 2 MB boundary.
    try:
        arena = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        arena.madvise(mmap.MADV_HUGEPAGE)
    except OSError as error:  # no room, or no huge pages after all: the weights stay, as fast as before
        log.warning("weights stay on 4 KB pages: cannot map %d MB of 2 MB pages for them (%s)", size >> 20, error)
        return 0
    whole = torch.frombuffer(arena, dtype=torch.uint8)  # each view holds the map for as long as it lives
    start = -whole.data_ptr() % HUGE_PAGE
    for (module, name), offset in zip(slots, offsets):
        source = getattr(module, name)
        view = whole[start + offset:start + offset + source.nbytes].view(source.dtype).view(source.shape)
        view.copy_(source)
        setattr(module, name, view)
    log.debug("%d MB of weights moved onto 2 MB pages", size >> 20)
    return size


def place_blocks_on_huge_pages(net: nn.Module) -> int:
    """Move every GGUF block buffer of `net` (the projections' and the head's)
    into an arena on 2 MB pages; the bytes moved, 0 where nothing moved."""
    layers = [m for m in net.modules() if isinstance(m, GGUFLinear)]
    slots = [(layer, name) for layer in layers for name in layer.block_buffers()
             if getattr(layer, name).device.type == "cpu"]
    moved = move_to_huge_pages(slots)
    for layer in layers if moved else ():
        layer.forget_parts()
    return moved
