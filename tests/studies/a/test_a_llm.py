"""The LLM probe runner (spec §A10.2, claim A-7) on tiny models and a stub endpoint built here; nothing is fetched."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
import torch

from conftest import build_tiny_llm, build_tokenizer
from posym.pipeline import claims, config
from posym import cli
from posym.lm.local import LocalModelError, load_local_model
from posym.studies.a import language_models
from posym.studies.a import llm_probes, paper
from posym.studies.a.tasks import PAPER_ORDER, get

A7 = config.study_defaults("a")["claims"]["a7"]  # the paper's filter (W = 16, 0.85) and windows 32, 100, 300

transformers = pytest.importorskip("transformers")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, tokenizer):
    """A randomly initialised 2-layer RoPE model (Llama) saved with its tokenizer."""
    return build_tiny_llm(tmp_path_factory.mktemp("llama"), tokenizer)


@pytest.fixture(scope="module")
def always_a_dir(tmp_path_factory, tokenizer):
    """A GPT-2 whose next token is always ``▁a``: the final LayerNorm outputs its bias e_0 at every position and the
    untied head maps e_0 to a logit of 10 for ``▁a`` and 0 for every other token."""
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_layer=1,
        n_embd=16,
        n_head=2,
        n_positions=1024,
        tie_word_embeddings=False,
        eos_token_id=1,
        bos_token_id=None,
    )
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[tokenizer.convert_tokens_to_ids("▁a"), 0] = 10.0
    path = tmp_path_factory.mktemp("always_a")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def probe(tmp_path, source: dict, runs=(0, 1), name="out"):
    """Run ``posym a llm-probe`` on 3 items per window (12 and 16) and run; the two output tables. ``source``:
    the llm settings that name the model."""
    items, summary = tmp_path / f"{name}_items.csv", tmp_path / f"{name}_summary.csv"
    settings = {"llm": {**source, "windows": [12, 16], "runs": list(runs), "items": 3}}
    argv = ["a", "llm-probe", "--settings", json.dumps(settings), "--threads", "1"]
    assert cli.main(argv + ["--out-probe-items", str(items), "--out-probe-summary", str(summary)]) == 0
    return items, summary


# ------------------------------------------------------------------------------------------ local models


def test_local_model_end_to_end_is_well_formed_and_deterministic(tmp_path, llama_dir):
    items_csv, summary_csv = probe(tmp_path, {"model": str(llama_dir)}, name="first")
    again_items, again_summary = probe(tmp_path, {"model": str(llama_dir)}, name="second")
    assert items_csv.read_bytes() == again_items.read_bytes() and summary_csv.read_bytes() == again_summary.read_bytes()

    items = llm_probes.read_items(items_csv)
    assert list(items.columns) == llm_probes.ITEM_COLUMNS and len(items) == 2 * 2 * 2 * 3
    assert set(items["model"]) == {llama_dir.name}
    for row in items.itertuples():
        item = llm_probes.probe_items(row.task, row.window, 3, seed=row.run)[row.item]
        assert row.answer == item["answer"]
        assert row.restricted in item["tokens"][:-1]  # always a window token
        assert row.greedy_correct == (row.greedy == row.answer) and row.restricted_correct == (
            row.restricted == row.answer
        )

    summary = pd.read_csv(summary_csv)
    assert list(summary.columns) == llm_probes.SUMMARY_COLUMNS and len(summary) == 2 * 2 * 2
    pd.testing.assert_frame_equal(summary, llm_probes.summarise(items), check_dtype=False)
    assert summary["accuracy"].between(0, 1).all() and (summary["runs"] == 2).all() and (summary["items"] == 3).all()


@pytest.mark.parametrize("tree", [True, False], ids=["one pass, 4-D mask", "cache branches (sliding-window models)"])
def test_cached_candidate_scores_equal_full_forward_passes(llama_dir, tree, monkeypatch):
    monkeypatch.setattr(language_models, "_plain_causal", lambda model: tree)
    local = load_local_model(llama_dir)
    item = llm_probes.probe_items("letter", 12, 1, seed=4)[0]
    text = local.prompt_text(item["prompt"])
    prompt_ids = local.prompt_ids(text)
    conts = language_models.continuations(local, text, llm_probes.window_candidates(item))
    assert {len(c) for c in conts} == {2}  # "▁c" + "2": the multi-token path
    with torch.no_grad():
        out = local.model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        first = torch.log_softmax(out.logits[:, -1], dim=-1)
        mask = torch.ones(1, len(prompt_ids), dtype=torch.long)
        [cached] = language_models.candidate_scores(local, out.past_key_values, mask, first, [conts])
        for k, cont in enumerate(conts):
            logits = local.model(input_ids=torch.tensor([prompt_ids + cont])).logits[0]
            logprobs = torch.log_softmax(logits, dim=-1)
            direct = sum(float(logprobs[len(prompt_ids) - 1 + j, token]) for j, token in enumerate(cont))
            assert cached[k] == pytest.approx(direct, abs=1e-4)


def test_a_batch_of_prompts_answers_as_each_prompt_alone(llama_dir):
    """Left padding, position ids and the batched cache copies change no answer and move no score beyond rounding:
    prompts of different lengths (windows 12 to 48) and both tasks (one- and two-token candidates) in one batch."""
    local = load_local_model(llama_dir)
    items = [i for task in PAPER_ORDER for w in (12, 48) for i in llm_probes.probe_items(task, w, 3, seed=7)]
    prompts, candidates = [i["prompt"] for i in items], [llm_probes.window_candidates(i) for i in items]
    assert len({len(local.prompt_ids(local.prompt_text(p))) for p in prompts}) > 1  # the batch is padded
    alone = [language_models.answer(local, p, c, 4) for p, c in zip(prompts, candidates)]
    assert language_models.answer_batch(local, prompts, candidates, 4) == alone
    with torch.no_grad():
        texts = [local.prompt_text(p) for p in prompts]
        ids = [local.prompt_ids(t) for t in texts]
        width = max(map(len, ids))
        mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
        padded = torch.tensor([[i[0]] * (width - len(i)) + i for i in ids])
        out = local.model(input_ids=padded, attention_mask=mask, position_ids=language_models._positions(mask))
        first = torch.log_softmax(out.logits[:, -1], dim=-1)
        conts = [language_models.continuations(local, t, c) for t, c in zip(texts, candidates)]
        batched = language_models.candidate_scores(local, out.past_key_values, mask, first, conts)
        for b, prompt_ids in enumerate(ids):
            single = local.model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
            one = torch.log_softmax(single.logits[:, -1], dim=-1)
            [expected] = language_models.candidate_scores(local, single.past_key_values, mask[b:b + 1, -len(prompt_ids):], one, [conts[b]])
            assert batched[b] == pytest.approx(expected, abs=1e-4)


def test_continuations_match_tokenising_the_whole_prompt(llama_dir):
    local = load_local_model(llama_dir)
    item = llm_probes.probe_items("number", 24, 1, seed=2)[0]
    text = local.prompt_text(item["prompt"])
    prompt_ids = local.tokenizer(text)["input_ids"]
    candidates = llm_probes.window_candidates(item)
    whole = [local.tokenizer(text + " " + c)["input_ids"][len(prompt_ids) :] for c in candidates]
    assert language_models.continuations(local, text, candidates) == whole


def rigged_items(task, window, n_items=3, seed=0):
    """Items whose answer is known: window 1, the answer is ``a`` (Number) or the one token starting with ``a``
    (Letter); window 2, the answer is ``b`` or starts with ``b``, while an ``a`` token is in the window."""
    rows = []
    for k in range(n_items):
        if task == "number":
            tokens = ["c", "a", "d", "2"] if window == 1 else ["b", "a", "d", "3"]
        else:
            tokens = ["c4", f"a{k + 1}", "d2", "xa"] if window == 1 else [f"b{k + 1}", "a5", "d2", "xb"]
        rows.append(
            {
                "task": task,
                "window": window,
                "tokens": tokens,
                "answer": get(task).solve_probe(tokens),
                "prompt": get(task).render_probe(tokens),
            }
        )
    return rows


def test_scoring_reaches_exactly_one_and_zero_on_a_model_with_a_known_answer(always_a_dir, monkeypatch):
    monkeypatch.setattr(llm_probes, "probe_items", rigged_items)
    local = load_local_model(always_a_dir)
    items = llm_probes.run_probes(llm_probes.local_answerer(local, 4), "always-a", ["number", "letter"], [1, 2], [0, 1], 3)
    assert set(items["greedy"]) == {"a"}  # "a a a a" cut to its first word
    accuracy = llm_probes.summarise(items).set_index(["task", "window", "method"])["accuracy"]
    assert accuracy[("number", 1, "greedy")] == 1.0 and accuracy[("number", 1, "restricted")] == 1.0
    assert accuracy[("number", 2, "greedy")] == 0.0 and accuracy[("number", 2, "restricted")] == 0.0
    assert accuracy[("letter", 1, "greedy")] == 0.0  # "a" is not "a1"
    assert accuracy[("letter", 1, "restricted")] == 1.0  # only the answer starts with "▁a"
    assert accuracy[("letter", 2, "restricted")] == 0.0


def test_chat_template_wraps_the_prompt_and_drops_the_separator(llama_dir, tmp_path, tokenizer):
    chat_dir = tmp_path / "chat"
    chat_dir.mkdir()
    for path in llama_dir.iterdir():
        (chat_dir / path.name).write_bytes(path.read_bytes())
    templated = build_tokenizer()
    templated.chat_template = "{% for m in messages %}<user> {{ m['content'] }} </user>{% endfor %} <bot>"
    templated.save_pretrained(chat_dir)
    assert not load_local_model(chat_dir, chat_template="off").chat
    local = load_local_model(chat_dir)
    assert local.chat and local.separator == ""
    assert local.prompt_text("Task: x") == "<user> Task: x </user> <bot>"
    with pytest.raises(LocalModelError, match="no chat template"):
        load_local_model(llama_dir, chat_template="on")


def test_missing_model_directory_is_a_clear_error(tmp_path):
    settings = json.dumps({"llm": {"model": str(tmp_path / "nope")}})
    with pytest.raises(SystemExit, match="not a directory"):
        cli.main(["a", "llm-probe", "--settings", settings, "--out-probe-items", "a", "--out-probe-summary", "b"])


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("c2", "c2"),
        (" y\n", "y"),
        ("'y'.", "y"),
        ('"k7"', "k7"),
        ("**o** because", "o"),
        ("`x4`", "x4"),
        ("", ""),
        ("  \n", ""),
    ],
)
def test_parse_answer(reply, answer):
    assert language_models.parse_answer(reply) == answer


# ---------------------------------------------------------------------------------------- HTTP endpoint


class StubEndpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that answers each probe correctly (as ``'answer'.``), after failing
    with the statuses queued in ``server.failures`` (a "sleep" entry stalls past the client's timeout)."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.server.failures:
            failure = self.server.failures.pop(0)
            if failure == "sleep":
                time.sleep(0.6)
                return
            self.send_response(failure)
            if failure == 429:
                self.send_header("Retry-After", "3")
            self.end_headers()
            self.wfile.write(b'{"error": "try later"}')
            return
        sequence = body["messages"][0]["content"].rsplit('Input: "', 1)[1].split('"')[0].split()
        task = "number" if sequence[-1].isdigit() else "letter"
        reply = {"choices": [{"message": {"role": "assistant", "content": f"'{get(task).solve_probe(sequence)}'."}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubEndpoint)
    server.requests, server.failures = [], []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def client(server, **kwargs):
    delays = []
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return (
        language_models.EndpointClient(base_url=base, model="stub", api_key="k", retries=3, sleep=delays.append, **kwargs),
        delays,
    )


def test_endpoint_probe_end_to_end(endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("POSYM_LLM_URL", f"http://127.0.0.1:{endpoint.server_address[1]}/v1")
    monkeypatch.setenv("POSYM_LLM_KEY", "secret")
    items_csv, summary_csv = probe(tmp_path, {"endpoint_model": "stub-model"}, runs=(0,))
    assert len(endpoint.requests) == 2 * 2 * 3
    prompts = {
        item["prompt"] for task in PAPER_ORDER for w in (12, 16) for item in llm_probes.probe_items(task, w, 3, seed=0)
    }
    for request in endpoint.requests:
        assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer secret"
        body = request["body"]
        assert body["model"] == "stub-model" and body["temperature"] == 0 and body["max_tokens"] == 5
        assert body["messages"][0]["role"] == "user" and body["messages"][0]["content"] in prompts
    items = llm_probes.read_items(items_csv)
    assert (
        items["greedy_correct"].all() and items["restricted"].eq("").all() and items["restricted_correct"].isna().all()
    )
    summary = pd.read_csv(summary_csv)
    assert (
        set(summary["method"]) == {"greedy"}
        and (summary["accuracy"] == 1.0).all()
        and set(summary["model"]) == {"stub-model"}
    )


def test_endpoint_retries_with_exponential_backoff(endpoint):
    endpoint.failures[:] = [500, 429, 503]
    stub, delays = client(endpoint)
    assert stub.complete(get("number").render_probe(["a", "b", "1"])) == "'b'."
    assert len(endpoint.requests) == 4
    assert delays == [1.0, 3.0, 4.0]  # 1·2⁰; max(1·2¹, Retry-After 3); 1·2²


def test_endpoint_retries_a_timeout(endpoint):
    endpoint.failures[:] = ["sleep"]
    stub, delays = client(endpoint, timeout=0.2)
    assert stub.complete(get("number").render_probe(["a", "b", "2"])) == "'a'."
    assert len(delays) == 1


def test_endpoint_gives_up_after_the_retry_limit(endpoint):
    endpoint.failures[:] = [503] * 10
    stub, delays = client(endpoint)
    with pytest.raises(language_models.EndpointError, match="gave up after 4 attempts; last: HTTP 503"):
        stub.complete("hello")
    assert len(endpoint.requests) == 4 and delays == [1.0, 2.0, 4.0]


def test_endpoint_does_not_retry_a_refusal(endpoint):
    endpoint.failures[:] = [401]
    stub, delays = client(endpoint)
    with pytest.raises(language_models.EndpointError, match="HTTP 401"):
        stub.complete("hello")
    assert len(endpoint.requests) == 1 and delays == []


def test_endpoint_needs_its_url_in_the_environment(monkeypatch):
    monkeypatch.delenv("POSYM_LLM_URL", raising=False)
    with pytest.raises(language_models.EndpointError, match=r"\$POSYM_LLM_URL is not set"):
        language_models.EndpointClient.from_environment("m", "POSYM_LLM_URL", "POSYM_LLM_KEY")


# ------------------------------------------------------------------------- Fig 5C/D, Table 3, claim A-7


def test_published_table3_holds_every_point():
    table = paper.LLM_ACCURACY
    assert sorted(table["window"].unique()) == list(llm_probes.PAPER_WINDOWS)
    assert table.groupby("model").size().to_dict() == {"GPT 5.4": 22, "GPT 5.5": 22, "Claude Sonnet 3.7": 20}
    from_figure = table[table["window"] == 150]
    assert (from_figure["source"] == "Fig 5C").all() and from_figure["sd"].isna().all()
    assert table.query("model == 'GPT 5.4' and task == 'letter' and window == 100")[
        ["accuracy", "sd"]
    ].values.tolist() == [[0.85, 0.05]]


def summary_items(letter: dict, number: dict, runs=(0, 1)) -> pd.DataFrame:
    """Items (10 per run) reaching the given accuracy per window, the same in every run, for both methods."""
    rows = []
    for task, accuracy in (("letter", letter), ("number", number)):
        for window, value in accuracy.items():
            for run in runs:
                for k in range(10):
                    correct = k < round(10 * value)
                    rows.append(
                        {
                            "model": "m",
                            "task": task,
                            "window": window,
                            "run": run,
                            "item": k,
                            "answer": "a",
                            "greedy": "a" if correct else "b",
                            "greedy_correct": correct,
                            "restricted": "a",
                            "restricted_correct": correct,
                        }
                    )
    return pd.DataFrame(rows, columns=llm_probes.ITEM_COLUMNS)


def test_claim_a7_passes_fails_and_is_untested_when_it_should():
    good = llm_probes.claim_a7(summary_items({16: 0.9, 32: 0.8, 100: 0.7, 300: 0.6}, {32: 0.3, 100: 0.7, 300: 0.1}), A7)
    verdicts = good.set_index(["check", "seed"])["verdict"]
    assert verdicts[("m, greedy: filter: letter accuracy at W = 16", "mean")] == "pass"
    assert verdicts[("m, greedy: letter > number at W = 32", "all")] == "pass"
    at_100 = good.set_index(["check", "seed"]).loc[("m, greedy: letter > number at W = 100", "all")]
    assert at_100["measured"].startswith("0 of 2 seeds pass; ")
    # the gap beside the paper's models' mean gap at W = 100 (Table 3: .77, .59, .80 letter − number)
    assert at_100["ours"] == 0 and abs(at_100["paper"] - (0.77 + 0.59 + 0.80) / 3) < 1e-9
    assert verdicts[("m, greedy: letter > number at W = 100", "0")] == "fail"  # a tie is not "greater"
    assert list(good.columns) == claims.COLUMNS and set(good["claim"]) == {"A-7"}

    weak = llm_probes.claim_a7(summary_items({16: 0.5, 32: 0.9}, {32: 0.1}), A7).set_index(["check", "seed"])
    assert weak.loc[("m, restricted: filter: letter accuracy at W = 16", "mean"), "verdict"] == "fail"
    assert weak.loc[("m, restricted: letter > number at W = 32", "0"), "verdict"] == "not tested"
    assert weak.loc[("m, restricted: letter > number at W = 32", "0"), "measured"].endswith("(the model fails the filter)")
    assert weak.loc[("m, restricted: letter > number at W = 300", ""), ["measured", "verdict"]].tolist() == [
        "W = 300 not measured",
        "not tested",
    ]

    # two models: each has its own filter and comparisons
    both = pd.concat([summary_items({16: 0.9, 32: 0.8}, {32: 0.3}), summary_items({16: 0.5, 32: 0.9}, {32: 0.1}).assign(model="n")])
    verdicts = llm_probes.claim_a7(both, A7).set_index(["check", "seed"])["verdict"]
    assert verdicts[("m, greedy: filter: letter accuracy at W = 16", "mean")] == "pass"
    assert verdicts[("m, greedy: letter > number at W = 32", "all")] == "pass"
    assert verdicts[("n, greedy: filter: letter accuracy at W = 16", "mean")] == "fail"
    assert verdicts[("n, greedy: letter > number at W = 32", "0")] == "not tested"

    nothing = llm_probes.claim_a7(None, A7)
    assert (nothing["verdict"] == "not tested").all() and (nothing["measured"] == "no model configured").all()

    # the filter and the windows are the schema's claims.a7
    other = llm_probes.claim_a7(summary_items({16: 0.5, 32: 0.9}, {32: 0.1}), {"filter_window": 32, "filter_accuracy": 0.8, "windows": [32]})
    verdicts = other.set_index(["check", "seed"])["verdict"]
    assert verdicts[("m, greedy: filter: letter accuracy at W = 32", "mean")] == "pass"
    assert verdicts[("m, greedy: letter > number at W = 32", "0")] == "pass"
    assert not other["check"].str.contains("W = 100").any()


def test_table3_and_figures_set_ours_beside_the_paper():
    ours = llm_probes.summarise(summary_items({12: 0.9, 16: 0.5}, {12: 0.2, 16: 0.4}))
    table = llm_probes.table3(paper.LLM_ACCURACY, ours)
    assert table["window"].tolist() == list(llm_probes.PAPER_WINDOWS)
    row = table.set_index("window")
    assert row.loc[12, "GPT 5.4 number (paper)"] == "0.98 (0.01)" and row.loc[150, "GPT 5.4 letter (paper)"] == "0.61"
    assert row.loc[12, "m, greedy letter (ours)"] == "0.90 (0.00)" and row.loc[300, "m, greedy letter (ours)"] == "—"
    assert row.loc[150, "Claude Sonnet 3.7 number (paper)"] == "—"
    assert llm_probes.table3(paper.LLM_ACCURACY, None).shape == (11, 1 + 6)

    for models in paper.LLM_FIGURES.values():
        alone = llm_probes.plot_llm_accuracy(paper.LLM_ACCURACY, models, None)
        assert "no model configured" in alone._suptitle.get_text()
        beside = llm_probes.plot_llm_accuracy(paper.LLM_ACCURACY, models, ours)
        legend = [t.get_text() for t in beside.axes[1].get_legend().get_texts()]
        assert len(legend) == len(models) + 2 + 1  # paper models + ours × 2 methods + chance
        chance = [line for line in beside.axes[1].get_lines() if line.get_label().startswith("chance")]
        assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(llm_probes.chance_accuracy("letter", [12])[12])
