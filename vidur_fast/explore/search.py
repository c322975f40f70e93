"""Maximum QPS meeting the SLOs: bracket by doubling (or halving), then bisect.

The search is sequential (each probe depends on the last); parallelism comes from searching
many deployments at once.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from vidur_fast.explore.slo import CapacitySettings


@dataclass
class SearchResult:
    capacity_qps: float
    """Highest QPS found to meet the SLOs (0 if none did)."""
    status: str
    """ok (bracketed and bisected), capped (met at max_qps), unreachable (failed at
    min_qps), probe_limit (max_probes reached first)."""
    probes: list[tuple[float, bool]] = field(default_factory=list)
    """(qps, met) in the order they were simulated."""


def find_capacity(meets: Callable[[float], bool], s: CapacitySettings) -> SearchResult:
    """Search the largest qps with meets(qps) True, assuming it holds below some threshold."""
    probes: list[tuple[float, bool]] = []

    def probe(q: float) -> bool:
        ok = meets(q)
        probes.append((q, ok))
        return ok

    def out_of_probes() -> bool:
        return len(probes) >= s.max_probes

    q = s.start_qps
    if probe(q):
        lo = q
        while True:
            if lo >= s.max_qps:
                return SearchResult(lo, "capped", probes)
            if out_of_probes():
                return SearchResult(lo, "probe_limit", probes)
            q = min(2 * lo, s.max_qps)
            if not probe(q):
                hi = q
                break
            lo = q
    else:
        hi = q
        while True:
            if hi <= s.min_qps:
                return SearchResult(0.0, "unreachable", probes)
            if out_of_probes():
                return SearchResult(0.0, "probe_limit", probes)
            q = max(hi / 2, s.min_qps)
            if probe(q):
                lo = q
                break
            hi = q
    while hi - lo > s.rel_tol * hi:
        if out_of_probes():
            return SearchResult(lo, "probe_limit", probes)
        mid = (lo + hi) / 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, "ok", probes)
