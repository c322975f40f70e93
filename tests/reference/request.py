"""One object per request, with the token accounting of the two scheduler families.

Vidur's schedulers (sarathi, vllm, orca, faster_transformer, lightllm) count `processed`
tokens with a bonus token at the end of the prefill and restart by turning everything
processed into prompt. vLLM v1 counts computed tokens and samples a token whenever the
computed tokens reach prompt + generated. vLLM v1 splits its computed tokens into those
applied (`processed`) and those scheduled in steps whose output has not come back yet
(`inflight`; always 0 at a scheduling step without async scheduling).
"""

from dataclasses import dataclass, field


@dataclass
class Request:
    rid: int
    arrival_ns: int
    prompt: int  # current prompt length (a Vidur restart may grow it)
    decode: int  # current decode length
    total: int  # prompt + decode as given
    asked_decode: int  # output tokens the request asked for
    processed: int = 0
    generated: int = 0
    prefill_done: bool = False
    replica: int = -1
    restarts: int = 0
    rejected: bool = False
    sched_ns: int | None = None  # first time it was in a launched batch
    first_tok_ns: int | None = None
    done_ns: int | None = None
    exec_ns: int = 0  # sum of its stage times
    model_ns: int = 0  # the same without the fixed host overhead of each stage
    preempt_ns: int = 0  # gaps between consecutive stage executions
    last_stage_end_ns: int = 0  # 0 = never executed
    last_tok_ns: int = 0
    tbt_n: int = 0  # gaps between consecutive output tokens
    tbt_sum_ns: int = 0
    tbt_max_ns: int = 0
    session: int = -1  # -1: none
    hashes: list = field(default_factory=list)  # workload hash of each leading block
    cached_tokens: int | None = None  # v1: prefix-cache hit at the first admission
    inflight: int = 0  # v1: tokens scheduled in steps not yet applied
    placeholders: int = 0  # v1 async: tokens sampled by steps in flight
    stale: int = 0  # v1 async: tokens in flight that were scheduled before a preemption

    @property
    def prompt_asked(self) -> int:
        return self.total - self.asked_decode

    def emit_token(self, now_ns: int) -> None:
        self.generated += 1
        if self.first_tok_ns is None:
            self.first_tok_ns = now_ns
        else:
            gap = now_ns - self.last_tok_ns
            self.tbt_n += 1
            self.tbt_sum_ns += gap
            self.tbt_max_ns = max(self.tbt_max_ns, gap)
        self.last_tok_ns = now_ns

    # ---- Vidur accounting ----

    def vidur_advance(self, n: int, now_ns: int) -> bool:
        """on_batch_end: +n processed; the prefill iteration adds one bonus (output) token.
        Returns whether the request completed."""
        self.processed += n
        if not self.prefill_done:
            if self.processed == self.prompt:
                self.prefill_done = True
                self.processed += 1
                self.emit_token(now_ns)
        else:
            self.emit_token(now_ns)
        assert self.processed <= self.prompt + self.decode
        return self.processed == self.prompt + self.decode

    def vidur_restart(self) -> None:
        """Recompute preemption: processed tokens become prompt. The prompt never shrinks (a
        request preempted mid-prefill keeps its prompt; Vidur relabels the rest as output)."""
        self.prompt = max(self.processed, self.prompt)
        self.decode = self.total - self.prompt
        self.processed = 0
        self.prefill_done = False
        self.restarts += 1

    # ---- vLLM v1 accounting ----

    @property
    def seq_len(self) -> int:
        return self.prompt + self.generated

    @property
    def computed(self) -> int:
        """vLLM's num_computed_tokens: applied plus scheduled in flight."""
        return self.processed + self.inflight

    def v1_advance(self, n: int, now_ns: int) -> bool:
        self.processed += n
        if self.processed >= self.seq_len:
            self.prefill_done = True
            self.emit_token(now_ns)
        return self.generated >= self.asked_decode

    def v1_reset(self) -> None:
        """Recompute preemption: tokens of a step still in flight become stale output."""
        self.stale += self.inflight
        self.inflight = 0
        self.processed = 0
        self.prefill_done = False
        self.restarts += 1
