"""ActivePRP's benchmark harness behind ``activeprp bench`` (a package of its own, installed with the ``bench``
extra: numpy, matplotlib, bm25s, ir-measures, pyarrow): collection loaders, simulator calibration, the ranker x
oracle x budget x round cap x seed grid, bootstrap statistics, reports, overhead and wall-time timings, and the
comparators only benchmarks use (``CachedComparator``: a sqlite answer cache; ``ZeroCostComparator``;
``RoundRecorder`` / ``SleepingComparator``). It holds what ``activeprp bench`` runs; studies and one-off figure
makers live in ``benchmarks/``.

It depends on ``activeprp_core``, never the reverse: the core CLI finds ``activeprp bench`` through the
``activeprp.commands`` entry point. The simulated judge itself (``SimulatedComparator``, ``from_qrels``,
``CALIBRATED_PARAMS``) is the core's.
"""

from .datasets import Collection, load_beir, load_cranfield, load_named, load_noveleval, load_trec_dl, load_trec_files
from .grid import Row, run_grid

# the statistics and reports (numpy, matplotlib) are imported from their modules when a report is made
__all__ = ["Collection", "Row", "load_beir", "load_cranfield", "load_named", "load_noveleval", "load_trec_dl",
           "load_trec_files", "run_grid"]
