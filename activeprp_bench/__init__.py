"""The benchmark harness behind ``activeprp bench``: collection loaders, simulator calibration, the ranker x oracle
x budget x seed grid, bootstrap statistics, reports and overhead timings. Needs the ``bench`` extra (numpy,
matplotlib, bm25s). The comparators it uses (simulated, sqlite-cached, zero-cost) live in
``activeprp_core.comparators``."""

from .datasets import Collection, load_beir, load_cranfield, load_named, load_noveleval, load_trec_dl, load_trec_files
from .grid import Row, run_grid

# the statistics and reports (numpy, matplotlib) are imported from their modules when a report is made
__all__ = ["Collection", "Row", "load_beir", "load_cranfield", "load_named", "load_noveleval", "load_trec_dl",
           "load_trec_files", "run_grid"]
