"""Link measurement between local ranks (starts processes with gloo)."""

import pytest

from pipeplan import links
from pipeplan.errors import BadArgumentError


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_fit_latency_and_bandwidth():
    comm = links.measure_links(2, sizes=(4096, 1 << 20, 16 << 20), repeats=5, deadline_s=100)
    assert comm.backend == "gloo" and comm.nproc == 2
    for fit in (comm.p2p, comm.allreduce):
        assert [s.bytes for s in fit.samples] == [4096, 1 << 20, 16 << 20]
        assert fit.latency_s < 0.05 and fit.bandwidth_bytes_per_s > 1e7
        largest = fit.samples[-1]
        assert largest.time_s > fit.samples[0].time_s  # bigger messages take longer


def test_single_rank_has_no_links():
    with pytest.raises(BadArgumentError):
        links.measure_links(1)
