"""test_prefix_cache_spec.py — test_prefix_cache.py with speculative decoding on (--spec-draft 3 on
the trained fixture, which has an MTP block): the checkpoints carry the MTP block's KV rows and
its pending hidden row, and the same acceptance holds — every turn's greedy output equals a cold
server's, the same reuse per turn, the disk tier after a restart, corrupted files refused — plus
the acceptance length of the cached server within 0.25 of the cold one's.
Runnable as a script; prints "N passed, N failed".
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import test_prefix_cache  # noqa: E402

if __name__ == "__main__":
    test_prefix_cache.main(spec=3)
