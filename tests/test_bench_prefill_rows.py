"""benchmarks/bench_prefill_rows.py times one llama.cpp call of G prompts' chunks in the batcher's context settings.

The figures themselves are run by hand (docs/models.md, docs/results.md); this checks that the script measures what
it says on the bundled model: every G a positive time, every sequence's logits compared, a prompt token's FLOPs
those of the 270M model without its output head.
"""

from __future__ import annotations

import pytest

from arena_learning.engines.bundled import resolve_model_path
from arena_learning.engines.llama_batcher import PROMPT_CHUNK

from .conftest import load_benchmark


@pytest.mark.slow  # loads the bundled model
def test_one_call_of_several_chunks_is_timed_and_compared():
    bench = load_benchmark("bench_prefill_rows")
    m = bench.measure(str(resolve_model_path("bundled")), threads=1, groups=[1, 2], repeat=1, chunk=PROMPT_CHUNK)
    assert set(m.seconds) == {1, 2} and all(s > 0 for s in m.seconds.values())
    assert set(m.differ) == {1, 2} and m.differ[1] == 0.0  # G = 1 is the reference itself
    # Gemma 3 270M: ~100M weights outside the 262,144 x 640 embedding, two FLOPs each; the tied head is left out.
    assert 1.5e8 < m.flops < 3.0e8
