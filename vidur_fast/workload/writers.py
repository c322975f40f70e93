"""Write a RequestTable back out as a Vidur-format trace CSV (plain or .gz by extension)."""

from pathlib import Path

import numpy as np

from vidur_fast.workload.table import RequestTable


def write_vidur_csv(table: RequestTable, path: str | Path) -> None:
    """arrived_at, num_prefill_tokens, num_decode_tokens [, session_id]
    [, block_hash_ids, block_size]; readable by read_trace (format "vidur")."""
    import pandas as pd

    columns = {
        "arrived_at": table.arrival_s,
        "num_prefill_tokens": table.prompt_tokens,
        "num_decode_tokens": table.decode_tokens,
    }
    if table.has_sessions:
        columns["session_id"] = table.session_id
    if table.has_hashes:
        per_request = np.split(table.hashes, table.hash_offsets[1:-1])
        columns["block_hash_ids"] = ["[" + ",".join(map(str, h)) + "]" for h in per_request]
        columns["block_size"] = np.full(len(table), table.hash_block_size, dtype=np.int64)
    pd.DataFrame(columns).to_csv(path, index=False)  # shortest repr: exact round trip
