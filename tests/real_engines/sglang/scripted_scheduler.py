"""A scripted SGLang scheduler: SGLang 0.5.23's own HTTP server, tokenizer and detokenizer managers around it.

Runs with the SGLang venv's Python (``scripts/engines/sglang`` makes it), never the project's::

    python scripted_scheduler.py SCRIPT.json --model-path DIR --port N [other SGLang server flags]

``main`` builds SGLang's ``ServerArgs`` from the flags and calls SGLang's own
``http_server.launch_server(server_args, run_scheduler_process_func=run_scripted_scheduler)``: the
FastAPI server, ``TokenizerManager`` (request validation, sampling-parameter parsing, ``/abort_request``,
disconnect handling) and the ``DetokenizerManager`` process are SGLang's. Only the scheduler process —
the one that would run the model — is this module's. It speaks SGLang's wire (``io_struct.sock_recv`` /
``sock_send`` over the same ZMQ sockets), builds a ``schedule_batch.Req`` per request, and emits
through SGLang's own ``_GenerationStreamAccumulator`` (``BatchTokenIDOutput``), so stop handling
(``Req.update_finish_state``: ``stop_token_ids``, the model's eos ids, ``max_new_tokens``), the finish
reasons, the incremental-detokenisation offsets and the streaming cadence are SGLang's. What a "model"
would write comes from the script instead of a forward pass.

The script (a JSON file, re-read for every request so a test can add cases while the server runs)::

    {"ready_delay": 0.0,            # seconds before the scheduler reports ready (an engine still loading)
     "rules": [{"key": "case-7",    # chosen when the decoded prompt contains it (the one written last wins)
                "output": [ids],    # the ids to write, one step at a time
                "per_step": 1,      # ids per step
                "step_delay": 0.0,  # seconds between steps
                "logprob": -0.25}], # the chosen id's logprob; alternatives follow (see _logprobs)
     "default": [ids]}              # for prompts no rule matches (SGLang's warm-up, health checks)

Every event is appended to the log file named by ``HARMONY_SGLANG_LOG`` as one JSON line: ``request``
(rid, prompt length, the sampling parameters *as the scheduler received them*, logprob options,
cached tokens, and for a ``structural_tag`` whether SGLang's xgrammar backend accepts the scripted ids),
``abort`` (the ``AbortReq`` the tokenizer manager sent) and ``finish`` (the finish reason and the output
ids) — what the tests assert on.

Prefix caching is modelled, not run: a request's ``cached_tokens`` is its longest common prefix with
any earlier request's prompt + output, at most the prompt length minus one (SGLang always computes one
prompt token), as SGLang's radix cache reports with page size 1.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from array import array
from typing import Any

logger = logging.getLogger("scripted_scheduler")


def _log(event: dict[str, Any]) -> None:
    path = os.environ.get("HARMONY_SGLANG_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def _script() -> dict[str, Any]:
    path = os.environ["HARMONY_SGLANG_SCRIPT"]
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _common_prefix(a: Any, b: Any) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _sampling_dict(sp: Any) -> dict[str, Any]:
    # The fields a client's request decides; what SGLang's tokenizer manager forwarded.
    names = (
        "max_new_tokens temperature top_p top_k min_p frequency_penalty presence_penalty repetition_penalty "
        "min_new_tokens n ignore_eos skip_special_tokens spaces_between_special_tokens no_stop_trim "
        "json_schema regex ebnf structural_tag stop_strs logit_bias sampling_seed"
    ).split()
    out = {name: getattr(sp, name, None) for name in names}
    out["stop_token_ids"] = sorted(sp.stop_token_ids) if sp.stop_token_ids else None
    return out


class _Running:
    """One request being 'generated': SGLang's Req plus where it is in its script."""

    def __init__(self, req: Any, output: list[int], per_step: int, step_delay: float, logprob: float) -> None:
        self.req = req
        self.output = output
        self.per_step = max(1, per_step)
        self.step_delay = step_delay
        self.logprob = logprob
        self.next_at = time.monotonic()
        self.pos = 0


def run_scripted_scheduler(
    server_args: Any,
    port_args: Any,
    gpu_id: int,
    tp_rank: int,
    pp_rank: int,
    dp_rank: int | None,
    pipe_writer: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    """SGLang's ``run_scheduler_process`` signature; answers the tokenizer manager from the script."""
    import zmq
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers import io_struct
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, Req
    from sglang.srt.managers.scheduler import configure_scheduler_process, resolve_spawn_dp_rank
    from sglang.srt.managers.scheduler_components.output_sender import SenderWrapper
    from sglang.srt.managers.scheduler_components.output_streamer import (
        DEFAULT_FORCE_STREAM_INTERVAL,
        _GenerationStreamAccumulator,
    )
    from sglang.srt.runtime_context import SpawnRanks, get_serving, publish, spawn_world_rank
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer
    from sglang.srt.utils.network import get_zmq_socket

    dp_rank = resolve_spawn_dp_rank(dp_rank)
    publish(
        server_args,
        role="scheduler",
        ranks=SpawnRanks(
            world_rank=spawn_world_rank(server_args, tp_rank=tp_rank, pp_rank=pp_rank), dp_rank=dp_rank, gpu_id=gpu_id
        ),
    )
    configure_scheduler_process(server_args, gpu_id)
    from sglang.srt.configs.model_config import ModelConfig

    model_config = ModelConfig.from_server_args(server_args)
    tokenizer = get_tokenizer(get_serving().tokenizer_path)
    eos_ids = model_config.hf_eos_token_id

    context = zmq.Context(2)
    recv = get_zmq_socket(context, zmq.PULL, port_args.scheduler_input_ipc_name, False)
    to_tokenizer = SenderWrapper(get_zmq_socket(context, zmq.PUSH, port_args.tokenizer_ipc_name, False))
    # With --skip-tokenizer-init there is nothing to detokenise: outputs go straight to the tokenizer
    # manager, as SGLang's own scheduler sends them (SchedulerIpcChannels).
    skip_init = get_serving().skip_tokenizer_init
    output_ipc = port_args.tokenizer_ipc_name if skip_init else port_args.detokenizer_ipc_name
    to_detokenizer = get_zmq_socket(context, zmq.PUSH, output_ipc, False)
    # The RPC socket is bound by the tokenizer side; connecting keeps its sends from blocking.
    get_zmq_socket(context, zmq.DEALER, port_args.rpc_ipc_name, False)

    time.sleep(float(_script().get("ready_delay", 0.0)))
    context_len = model_config.context_len
    pipe_writer.send(
        {"status": "ready", "max_total_num_tokens": 1 << 20, "max_req_input_len": context_len - 1, "startup_time": 0.0}
    )

    running: dict[str, _Running] = {}
    history: list[array] = []  # prompt + output of every finished request (the modelled prefix cache)
    poller = zmq.Poller()
    poller.register(recv, zmq.POLLIN)

    def admit(recv_req: Any) -> None:
        script = _script()
        ids = recv_req.input_ids
        text = tokenizer.decode(list(ids)) if ids is not None else (recv_req.input_text or "")
        chosen: dict[str, Any] = {"output": script.get("default") or [], "key": None}
        latest = -1
        for rule in script.get("rules", []):
            # The key written last in the prompt: a later turn's prompt holds the earlier turns' keys too.
            at = text.rfind(rule["key"])
            if at > latest:
                chosen, latest = rule, at
        req = Req(
            recv_req.rid,
            recv_req.input_text,
            recv_req.input_ids,
            recv_req.sampling_params,
            return_logprob=recv_req.return_logprob,
            top_logprobs_num=recv_req.top_logprobs_num,
            token_ids_logprob=recv_req.token_ids_logprob,
            stream=recv_req.stream,
            eos_token_ids=eos_ids,
            vocab_size=model_config.vocab_size,
            http_worker_ipc=recv_req.http_worker_ipc,
            time_stats=recv_req.time_stats,
            disagg_mode=DisaggregationMode.NULL,
        )
        req.tokenizer = tokenizer
        grammar = _grammar_check(recv_req.sampling_params.structural_tag, list(chosen.get("output") or []))
        best = max((_common_prefix(ids, seen) for seen in history), default=0)
        req.cached_tokens = min(best, max(len(ids) - 1, 0))
        _log(
            {
                "event": "request",
                "rid": recv_req.rid,
                "key": chosen.get("key"),
                "prompt_tokens": len(ids),
                "sampling": _sampling_dict(recv_req.sampling_params),
                "return_logprob": recv_req.return_logprob,
                "top_logprobs_num": recv_req.top_logprobs_num,
                "logprob_start_len": recv_req.logprob_start_len,
                "stream": recv_req.stream,
                "cached_tokens": req.cached_tokens,
                "grammar": grammar,
                # What SGLang's HTTP server and tokenizer manager hand the scheduler of a request's priority.
                "priority": getattr(recv_req, "priority", None),
            }
        )
        running[recv_req.rid] = _Running(
            req,
            list(chosen.get("output") or []),
            int(chosen.get("per_step", 1)),
            float(chosen.get("step_delay", 0.0)),
            float(chosen.get("logprob", -0.25)),
        )

    backend: list[Any] = []  # SGLang's grammar backend, made at the first constrained request

    def _grammar_check(tag: str | None, output: list[int]) -> dict[str, Any] | None:
        # No sampler runs here, so the grammar cannot steer; instead SGLang's own xgrammar backend (as its
        # grammar manager builds it) compiles the request's structural tag and replays the scripted ids
        # through the matcher: what a grammar-following sampler would have been allowed to write.
        if tag is None:
            return None
        from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject, create_grammar_backend

        if not backend:
            backend.append(
                create_grammar_backend(
                    server_args, tokenizer, model_config.vocab_size, eos_ids, think_end_ids=model_config.think_end_ids
                )
            )
        started = time.perf_counter()
        grammar = backend[0].dispatch_structural_tag(tag)
        compile_ms = (time.perf_counter() - started) * 1000  # xgrammar's compile, as SGLang's backend asks it
        if isinstance(grammar, InvalidGrammarObject):
            return {"error": grammar.error_message}
        result: dict[str, Any] = {
            "accepted_all": True,
            "rejected_at": None,
            "rejected_token": None,
            "compile_ms": compile_ms,
        }
        for i, token in enumerate(output):
            if grammar.matcher.is_terminated():
                break
            if not grammar.matcher.accept_token(token):
                result.update(accepted_all=False, rejected_at=i, rejected_token=token)
                break
        result["terminated"] = grammar.matcher.is_terminated()
        return result

    def abort(recv_req: Any) -> None:
        _log({"event": "abort", "rid": recv_req.rid, "abort_all": recv_req.abort_all})
        for rid, item in running.items():
            # SGLang matches an abort's rid as a prefix of the running request's (scheduler.abort_request).
            if (recv_req.abort_all or rid.startswith(recv_req.rid)) and not item.req.finished():
                item.req.to_finish = FINISH_ABORT()

    def step(item: _Running) -> None:
        req = item.req
        new = item.output[item.pos : item.pos + item.per_step]
        if not new and req.to_finish is None:
            # The script ran out before a stop or the budget: write filler ids, as a model would go on.
            new = [0] * item.per_step
        item.pos += len(new)
        for token in new:
            req.output_ids.append(token)
            if req.return_logprob:
                _logprobs(req, token, item.logprob)
        req.update_finish_state(max(len(new), 1) if new else 1)

    def emit(reqs: list[Any]) -> None:
        acc = _GenerationStreamAccumulator(
            return_logprob=any(r.return_logprob for r in reqs),
            return_hidden_states=False,
            return_routed_experts=False,
            return_indexer_topk=False,
            return_sampling_mask=False,
            spec_algorithm=SpeculativeAlgorithm.NONE,
            disaggregation_mode=DisaggregationMode.NULL,
            default_stream_interval=get_serving().stream_interval,
            default_force_stream_interval=DEFAULT_FORCE_STREAM_INTERVAL,
            get_cached_tokens_details=lambda req: None,
            is_request_level_customized_info_key=lambda key: False,
            current_weight_version=get_serving().weight_version,
        )
        for req in reqs:
            acc.accept(req=req)
        payload = acc.to_payload(dp_rank=0, is_idle_batch=False)
        if payload is not None:
            io_struct.sock_send(to_detokenizer, payload)

    def _logprobs(req: Any, token: int, value: float) -> None:
        # Chosen id first, then k-1 alternatives (the next ids, each 1.0 less likely): deterministic, so a
        # test knows exactly what a client must see.
        lp = req.logprob
        for name in ("output_token_logprobs_val", "output_token_logprobs_idx", "output_top_logprobs_val"):
            if getattr(lp, name) is None:
                setattr(lp, name, [])
        if lp.output_top_logprobs_idx is None:
            lp.output_top_logprobs_idx = []
        lp.output_token_logprobs_val.append(value)
        lp.output_token_logprobs_idx.append(token)
        k = req.logprob.top_logprobs_num
        lp.output_top_logprobs_val.append([value - i for i in range(k)])
        lp.output_top_logprobs_idx.append([(token + i) % 199998 if i else token for i in range(k)])

    while True:
        timeout = 50
        if running:
            wait = min(item.next_at for item in running.values()) - time.monotonic()
            timeout = max(0, int(wait * 1000))
        if poller.poll(timeout):
            while True:
                try:
                    message = io_struct.sock_recv(recv, zmq.NOBLOCK)
                except zmq.ZMQError:
                    break
                items = message.batch if isinstance(message, io_struct.BatchTokenizedGenerateReqInput) else [message]
                for item in items:
                    if isinstance(item, io_struct.TokenizedGenerateReqInput):
                        admit(item)
                    elif isinstance(item, io_struct.AbortReq):
                        abort(item)
                    elif isinstance(item, io_struct.GetInternalStateReq):
                        # /server_info waits for this; a real scheduler dumps its state.
                        state = {"max_total_num_tokens": 1 << 20, "scripted": True}
                        to_tokenizer.send_output(io_struct.GetInternalStateReqOutput(internal_state=state), item)
                    else:
                        logger.info("scripted scheduler: ignoring %s", type(item).__name__)
        now = time.monotonic()
        due = [item for item in running.values() if item.next_at <= now]
        for item in due:
            step(item)
            item.next_at = now + item.step_delay
        if due:
            emit([item.req for item in due])
        for item in due:
            req = item.req
            if req.finished():
                reason = req.finished_reason.to_json()
                _log({"event": "finish", "rid": req.rid, "reason": reason, "output_ids": list(req.output_ids)})
                history.append(array("q", list(req.origin_input_ids) + list(req.output_ids_through_stop)))
                del running[req.rid]


def main() -> None:
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    os.environ["HARMONY_SGLANG_SCRIPT"] = os.path.abspath(sys.argv[1])
    server_args = prepare_server_args(sys.argv[2:])
    launch_server(server_args, run_scheduler_process_func=run_scripted_scheduler)


if __name__ == "__main__":
    main()
