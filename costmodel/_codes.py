"""The names behind the strategy table's integer codes that a framework profile also reads: a code is
its name's position (append only). costmodel._strategy re-exports them with the other dimensions;
costmodel._frameworks reads the schedules here, so that the strategy table can read the profiles'
names (its framework column) without an import circle."""

from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "hanayo")
RECOMPUTE = ("none", "selective", "full")
