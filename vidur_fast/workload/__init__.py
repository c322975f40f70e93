"""Workload layer: configs, trace readers, synthetic generators -> RequestTable.

table = build_workload(SyntheticWorkload(), seed=0)
table = build_workload(TraceWorkload("trace.jsonl.gz"), seed=0, need_hashes=True)
"""

from vidur_fast.config.validate_workload import validate_workload
from vidur_fast.config.workload import (
    ClosedLoopWorkload,
    FixedLengths,
    GammaIntervals,
    IntervalGenerator,
    LengthGenerator,
    PoissonIntervals,
    StaticIntervals,
    SyntheticWorkload,
    TraceIntervals,
    TraceLengths,
    TraceWorkload,
    UniformIntervals,
    UniformLengths,
    Workload,
    ZipfLengths,
)
from vidur_fast.workload.build import build_workload
from vidur_fast.workload.readers import TraceData, detect_format, read_trace
from vidur_fast.workload.table import RequestTable, make_table
from vidur_fast.workload.writers import write_vidur_csv

__all__ = [
    "ClosedLoopWorkload",
    "FixedLengths",
    "GammaIntervals",
    "IntervalGenerator",
    "LengthGenerator",
    "PoissonIntervals",
    "RequestTable",
    "StaticIntervals",
    "SyntheticWorkload",
    "TraceData",
    "TraceIntervals",
    "TraceLengths",
    "TraceWorkload",
    "UniformIntervals",
    "UniformLengths",
    "Workload",
    "ZipfLengths",
    "build_workload",
    "detect_format",
    "make_table",
    "read_trace",
    "validate_workload",
    "write_vidur_csv",
]
