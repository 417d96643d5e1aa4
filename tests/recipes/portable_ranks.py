"""Rank entry for test_portable.py, under torchrun: several prepared `recipe run`s one after another in the same
rank processes (one process group for all of them), so that many strategy pairs cost a few launches.

Each file is what `recipe run` hands its ranks (recipes/run.py Prepared); train() is the rank's whole run."""
from __future__ import annotations

import sys
from pathlib import Path

from shardlab.recipes import ranks
from shardlab.recipes.run import Prepared, train

if __name__ == "__main__":
    for file in sys.argv[1:]:
        train(Prepared.load(Path(file)))
    ranks.finish_rank()
