"""The process environment radixlm sets up (``radixlm/_env.py``): huge pages for the malloc of the
processes that hold int8 model weights, only for them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from radixlm._env import huge_page_malloc_in_children, wants_huge_page_malloc, with_huge_page_malloc


def test_huge_page_tunable_is_added_once_and_keeps_the_users_own() -> None:
    assert with_huge_page_malloc(None) == "glibc.malloc.hugetlb=1"
    assert with_huge_page_malloc("") == "glibc.malloc.hugetlb=1"
    both = "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert with_huge_page_malloc("glibc.malloc.arena_max=2") == both
    assert with_huge_page_malloc(both) == both
    assert with_huge_page_malloc("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0"  # the user's choice


@pytest.mark.parametrize("before", [None, "glibc.malloc.arena_max=2"])
def test_children_started_in_the_block_get_it_and_this_process_is_restored(monkeypatch, before) -> None:
    if before is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", before)
    show = [sys.executable, "-c", "import os; print(os.environ.get('GLIBC_TUNABLES', ''))"]
    with huge_page_malloc_in_children("int8"):
        inside = subprocess.run(show, capture_output=True, text=True, check=True).stdout.strip()
    assert inside == with_huge_page_malloc(before)
    assert os.environ.get("GLIBC_TUNABLES") == before


def test_only_int8_weights_want_it(monkeypatch) -> None:
    assert wants_huge_page_malloc("int8")
    assert not any(wants_huge_page_malloc(m) for m in ("none", "auto", "q4_0", "q4_1", "q4_k_m"))
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    show = [sys.executable, "-c", "import os; print(os.environ.get('GLIBC_TUNABLES', ''))"]
    with huge_page_malloc_in_children("none"):
        inside = subprocess.run(show, capture_output=True, text=True, check=True).stdout.strip()
    assert inside == "glibc.malloc.arena_max=2"


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    return re.search(r"\[(\w+)\]", text).group(1)


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"), reason="transparent huge pages are off here")
def test_prepacked_int8_weights_land_on_huge_pages_in_such_a_child() -> None:
    """What the tunable is for: FBGEMM allocates its prepacked weights with malloc, out of reach of
    torch's THP_MEM_ALLOC_ENABLE."""
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    match = re.match(r"glibc (\d+)\.(\d+)", libc)
    if not match or (int(match.group(1)), int(match.group(2))) < (2, 35):
        pytest.skip(f"glibc.malloc.hugetlb needs glibc >= 2.35, this is {libc!r}")
    probe = """
import re, warnings
import radixlm._env, torch
warnings.filterwarnings("ignore")
def huge_mb():
    rollup = open("/proc/self/smaps_rollup").read()
    return int(re.search(r"AnonHugePages:\\s+(\\d+)", rollup).group(1)) // 1024
w = torch.randn(8192, 8192)
q = torch.quantize_per_channel(w, w.abs().amax(1) / 127, torch.zeros(8192, dtype=torch.long), 0, torch.qint8)
before = huge_mb()
packed = torch.ops.quantized.linear_prepack(q, None)
print(huge_mb() - before)
"""
    grown = {}
    for label, tunables in (("plain", ""), ("huge", with_huge_page_malloc(None))):
        env = dict(os.environ, GLIBC_TUNABLES=tunables)
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
        )
        grown[label] = int(out.stdout.strip().splitlines()[-1])
    assert grown["huge"] >= 32, grown  # the 64 MB of packed int8 weights, mostly on 2 MB pages
    assert grown["huge"] > grown["plain"], grown
