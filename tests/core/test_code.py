"""Code fingerprints (posym.pipeline.code): what counts as a change of a job's code, and what does not."""

from __future__ import annotations

import ast

import pytest

from posym.pipeline import code

PLAIN = '''
def f(x):
    """What f does."""
    # a comment
    return x + 1
'''


def test_docstrings_comments_and_formatting_do_not_count():
    edited = PLAIN.replace("What f does.", "Another text.").replace("# a comment", "# another").replace("x + 1", "x+1")
    assert code.normalised(edited) == code.normalised(PLAIN)
    assert code.normalised(PLAIN.replace("x + 1", "x + 2")) != code.normalised(PLAIN)


def test_a_command_holds_its_function_and_what_it_imports_not_the_other_commands():
    scores = code.command_code("a scores").modules
    assert {"posym.studies.a.cli:cmd_scores", "posym.studies.a.head_scores"} <= set(scores)
    assert "posym.studies.a.rope_geometry" not in scores  # another command's analysis
    train = code.command_code("train").modules
    assert "posym.studies.a.head_scores" not in train and "posym.training.trainer" in train


def test_modules_loaded_by_name_count_for_the_loader():
    # posym data finds every study's tasks through the registry, not by an import
    assert "posym.studies.a.tasks.number" in code.command_code("data").modules


def test_a_notebook_job_holds_the_modules_its_cells_import():
    from posym.pipeline import study

    source = study.load("a").notebooks["scores"].source
    assert "posym.studies.a.head_dynamics" in code.command_code("notebook", str(source)).modules


def test_every_loader_of_study_modules_is_known():
    """A module that loads study modules by name is in LOADERS (its loads count) or NOT_LOADERS (said why not)."""
    known = set(code.LOADERS) | set(code.NOT_LOADERS)
    loaders = set()
    for path in code.PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        if {"study_module", "import_module"} & calls:
            parts = path.relative_to(code.PACKAGE.parent).with_suffix("").parts
            loaders.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    loaders -= {"posym.registry", "posym.lm.pretrained"}  # the registry itself; pretrained imports installed packages
    assert loaders <= known, sorted(loaders - known)


def test_an_unknown_command_is_named():
    with pytest.raises(Exception, match="nothing"):
        code.command_code("a nothing")


def test_a_rule_whose_code_is_another_commands_or_missing_is_refused():
    """check_rule, as the Snakefile runs it on every rule: the command a rule's params run, or the ``posym``
    command its shell text runs, must be the one whose code its shell's mark carries."""
    from posym.pipeline import jobs
    from posym.pipeline.config import validate

    config = validate({"studies": ["b"]})
    probe = jobs.rule_params(config, "b probe")["job"]
    code.check_rule("probe", code.shell_mark("b probe") + "posym {params.job}", probe)
    with pytest.raises(code.CodeError, match=r"rule probe: its shell starts with the code of posym b toeplitz but it runs posym b probe"):
        code.check_rule("probe", code.shell_mark("b toeplitz") + "posym {params.job}", probe)
    with pytest.raises(code.CodeError, match=r"rule probe: its shell command does not start with code\(\.\.\.\)"):
        code.check_rule("probe", "posym {params.job}", probe)
    # a command in the shell text: after the mark, or after a ( or ; of it
    code.check_rule("split", code.shell_mark("data") + "posym data --task {wildcards.task}")
    code.check_rule("outputs", code.shell_mark("train-outputs") + "(cat {params.log:q}; posym train-outputs --seed 0)")
    with pytest.raises(code.CodeError, match=r"rule split: .* code of posym train but it runs posym \(not found"):
        code.check_rule("split", code.shell_mark("train") + "posym data --task {wildcards.task}")
    code.check_rule("all", None)  # a rule that runs nothing


def test_a_digest_stays_while_only_definitions_are_added_beside_its_parts():
    """stable_digest: a new definition (a new task module, a new scheme's class) keeps every job's digest; a change
    or a removal of one it was made of gives a new one, and so does a change of the added definition later (its
    own jobs, a new task's, ran with it). An edit undone finds its digest again."""
    first = {"m": "0", "m:f": "1", "m:g": "2"}
    key = "test stable digest"
    code._facts.setdefault("digests", {}).pop(key, None)
    digest = code.stable_digest(key, first)
    assert code.stable_digest(key, {**first, "m:new": "3", "other.module": "4"}) == digest
    assert code.stable_digest(key, {**first, "m:new": "3", "other.module": "5"}) != digest  # the added part changed

    code._facts["digests"].pop(key)
    digest = code.stable_digest(key, first)
    edited = code.stable_digest(key, {**first, "m:g": "9"})
    assert edited != digest
    # the edit undone, with a definition added meanwhile (a dry run saw the edit): the digest from before the edit
    assert code.stable_digest(key, {**first, "m:other": "6"}) == digest
    assert code.stable_digest(key, {**first, "m:g": "9"}) == edited
    assert code.stable_digest(key, {"m": "0", "m:f": "1"}) not in (digest, edited)  # g removed
    assert len(code._facts["digests"][key]) <= code.KEPT_STATES
    code._facts["digests"].pop(key)


def test_a_module_counts_by_its_definitions_and_the_rest_of_its_statements():
    tree = ast.parse(PLAIN + "\nX = 1\n\n\nclass C:\n    '''Doc.'''\n    y = 2\n")
    parts = code._parts(tree)
    assert set(parts) == {"", "f", "C"}
    edited = code._parts(ast.parse((PLAIN + "\nX = 1\n\n\nclass C:\n    '''Doc.'''\n    y = 2\n").replace("What f does.", "Other.")))
    assert edited == parts
    assert code._parts(ast.parse(PLAIN + "\nX = 2\n"))[""] != code._parts(ast.parse(PLAIN + "\nX = 1\n"))[""]
