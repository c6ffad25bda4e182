"""Code fingerprints: which posym code a job runs, as one hash that only a change of behaviour changes.

A job's code is found from the imports, without importing anything: its command's function (``posym a scores``:
``posym.studies.a.cli:cmd_scores``, from the study's jobs table; a core command ``posym train``:
``posym.cli:cmd_train``), the definitions of its own module that function uses, and every posym module it
imports, inside functions too, with the modules those import, transitively, and the packages they sit in. A
notebook job's code is ``posym notebook`` and the posym modules its code cells import. The argument parsing
every command shares (``posym.cli:main``, the jobs tables) is not part of it: it reads arguments and decides
nothing a job writes.

Each module counts by its *normalised* source: its syntax tree without docstrings, printed back
(:func:`ast.unparse`), so that docstrings, comments and formatting do not count. The rules put a job's
fingerprint into its shell command (:func:`shell_mark`), the text Snakemake's ``code`` rerun trigger compares
between runs; ``--rerun-triggers mtime params input software-env`` leaves code out as for any Snakemake rule.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import posym

PACKAGE = Path(posym.__file__).resolve().parent
#: Characters of a fingerprint (hex of sha256): enough to tell a project's code states apart.
DIGITS = 12
#: How many states of a command's code :func:`stable_digest` keeps, the newest first.
KEPT_STATES = 8
#: Where posym loads study modules by name rather than by an import (posym.registry): the module that does, and
#: the module (or package, with every module in it) of each study it loads. A job whose code holds the loader holds
#: these too. The studies' ``config_checks`` (posym.pipeline.config) are left out on purpose: they accept or
#: refuse a configuration before any job runs and change nothing a job writes. tests/core/test_code.py checks
#: that every loader is named here or there.
LOADERS = {
    "posym.data.tasks": ("tasks",),
    "posym.nn.architectures": ("architecture",),
    "posym.pipeline.variants": ("variants",),
    "posym.pipeline.scale": ("variants", "paper"),  # the trained size, and the paper's
}
#: Every study module a loader of :data:`LOADERS` loads.
LOADED = frozenset(name for names in LOADERS.values() for name in names)
#: Loaders whose loads are not a job's code: the configuration checks (above) and the jobs tables, which name the
#: commands and their arguments.
NOT_LOADERS = {
    "posym.pipeline.config": "config_checks",
    "posym.pipeline.jobs": "jobs",
    "posym.pipeline.code": "jobs",
    "posym.cli": "jobs",
}


class CodeError(ValueError):
    """A command or function whose code cannot be found."""


@dataclass(frozen=True)
class Fingerprint:
    """The code a job runs: ``digest`` names it; ``modules``: each posym module of it by its normalised hash
    (``posym.cli:cmd_train`` style entries for the functions of an entry module that count alone)."""

    digest: str
    modules: Mapping[str, str]


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return tree


def normalised(source: str) -> str:
    """``source`` as its syntax tree without docstrings, printed back: comments and formatting are gone."""
    return ast.unparse(_strip_docstrings(ast.parse(source)))


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGITS]


def module_file(name: str) -> Path | None:
    """The source file of posym module ``name`` (a package's ``__init__.py``), or None where it has none."""
    parts = name.split(".")
    if parts[0] != "posym":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(nodes: Iterable[ast.AST], module: str, is_package: bool) -> set[str]:
    """The posym modules the import statements within ``nodes`` name (``from x import y``: x, and x.y where
    that is a module)."""
    found = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, module, is_package)
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}"))
    return {name for name in found if module_file(name)}


#: What was found of each module, by its file's size and modification time, kept between runs of the workflow in
#: the file :func:`use_cache` names: parsing every module again would cost each no-op rerun seconds.
_facts: dict[str, dict] = {}
_cache: dict = {"path": None, "changed": False}


def use_cache(path: Path | str) -> None:
    """Keep the facts found of modules in ``path`` (JSON), and start from those kept there before."""
    path = Path(path)
    _cache["path"] = path
    try:
        _facts.update(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass  # no cache yet, or a broken one: it is rebuilt


def _save_cache() -> None:
    path = _cache["path"]
    if path is None or not _cache["changed"]:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(_facts, sort_keys=True))
    os.replace(tmp, path)
    _cache["changed"] = False


def _stat(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _known(key: str, path: Path, compute) -> dict:
    """The facts ``compute()`` finds of ``path``, from the cache while the file is unchanged."""
    stat = _stat(path)
    entry = _facts.get(key)
    if entry is None or entry["stat"] != stat:
        entry = {"stat": stat, **compute()}
        _facts[key] = entry
        _cache["changed"] = True
    return entry


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _module(name: str) -> tuple[str, frozenset[str], bool]:
    """A posym module's normalised hash, the posym modules it imports anywhere, and whether it is a package."""
    path = module_file(name)
    if path is None:
        raise CodeError(f"posym has no module {name}")
    is_package = path.name == "__init__.py"

    def compute():
        tree = _tree(path)
        return {
            "hash": _hash(normalised(path.read_text(encoding="utf-8"))),
            "imports": sorted(_imports([tree], name, is_package)),
            "parts": _parts(tree),
        }

    entry = _known(f"module {name}", path, compute)
    return entry["hash"], frozenset(entry["imports"]), is_package


def _loaded(name: str) -> list[str]:
    """The study modules loader ``name`` (:data:`LOADERS`) loads by name: of every study, since which study a job
    asks for is a value, not an import."""
    if name not in LOADERS:
        return []
    from posym import registry

    found = []
    for study in registry.known():
        for loaded in LOADERS[name]:
            base = registry.folder(study) / loaded
            module = f"posym.studies.{study}.{loaded}"
            if base.with_suffix(".py").is_file():
                found.append(module)
            elif (base / "__init__.py").is_file():
                found += [module] + [f"{module}.{p.stem}" for p in sorted(base.glob("*.py")) if p.stem != "__init__"]
    return found


def _packages(name: str) -> list[str]:
    """The packages importing ``name`` runs first (posym, posym.studies, posym.studies.a, ...)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def closure(modules: Iterable[str]) -> dict[str, str]:
    """``modules``, every posym module they import (transitively) and their packages, each by its hash."""
    todo, seen = list(modules), {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        digest, imports, _ = _module(name)
        seen[name] = digest
        todo += [m for m in [*imports, *_packages(name), *_loaded(name)] if m not in seen]
    return seen


def _parts(tree: ast.Module) -> dict[str, str]:
    """A module's top-level functions and classes each by its normalised hash (decorators included), and the rest
    of its statements (imports, assignments, calls) as one part, ``""``: what :func:`stable_digest` compares."""
    _strip_docstrings(tree)
    parts, rest = {}, []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name not in parts:
            parts[node.name] = _hash(ast.unparse(node))
        else:
            rest.append(ast.unparse(node))
    return {"": _hash("\n".join(rest)), **parts}


def definitions(modules: Mapping[str, str]) -> dict[str, str]:
    """The parts (:func:`_parts`) of each module of a fingerprint's ``modules`` (an entry ``module:function``
    counts as one part), keyed ``module`` for the rest of its statements and ``module:Name`` for a definition."""
    found = {}
    for name, digest in modules.items():
        if ":" in name:
            found[f"{name}()"] = digest
            continue
        path = module_file(name)
        _module(name)  # its facts, from the cache while the file is unchanged
        entry = _facts[f"module {name}"]
        if "parts" not in entry:  # kept by an older posym
            entry["parts"] = _parts(_tree(path))
            _cache["changed"] = True
        found.update({name if part == "" else f"{name}:{part}": digest for part, digest in entry["parts"].items()})
    return found


def _bound_names(node: ast.stmt) -> set[str]:
    """The names a module-level statement binds (a def, a class, an assignment, an import)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def function_code(entry: str) -> Fingerprint:
    """The code of ``"module:function"``: that function and the definitions of its module it uses (by name,
    transitively), plus the closure of the posym modules they import, in the function or at module level."""
    module, _, function = entry.partition(":")
    _, _, is_package = _module(module)
    path = module_file(module)
    found = _known(f"function {entry}", path, lambda: _function_facts(entry, _tree(path), is_package))
    return _combine({entry: found["hash"], **closure(found["imports"])})


def _function_facts(entry: str, tree: ast.Module, is_package: bool) -> dict:
    module, _, function = entry.partition(":")
    statements: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        for name in _bound_names(node):
            statements.setdefault(name, []).append(node)
    if function not in statements:
        raise CodeError(f"{module} has no function {function} ({entry})")
    chosen: list[ast.stmt] = []
    todo, seen = [function], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in statements:
            continue
        seen.add(name)
        for node in statements[name]:
            if node not in chosen:
                chosen.append(node)
                todo += sorted(_used_names(node) - seen)
    own = sorted(chosen, key=lambda n: n.lineno)
    digest = _hash("\n".join(normalised(ast.unparse(n)) for n in own))
    return {"hash": digest, "imports": sorted(_imports(own, module, is_package) | set(_packages(module)))}


def _combine(modules: Mapping[str, str]) -> Fingerprint:
    ordered = dict(sorted(modules.items()))
    return Fingerprint(_hash(json.dumps(ordered, sort_keys=True)), ordered)


def command_entry(command: str) -> str:
    """The function that ``posym <command>`` runs: its entry in the jobs tables (posym.pipeline.jobs), else the
    core command's ``posym.cli:cmd_<command>``."""
    from posym.pipeline import jobs

    study_id, table, name = jobs.lookup(command)
    for job in table:
        if job.name == name:
            return job.function
    if study_id is None:
        return f"posym.cli:cmd_{name.replace('-', '_').replace(' ', '_')}"
    raise CodeError(f"study {study_id} has no command {name!r}")


def core_commands() -> tuple[str, ...]:
    """The core's commands the rules run (workflow/rules/), whose code a report records."""
    return ("data", "train", "train-outputs", "evaluate", "convert-model", "report build")


def study_commands(study_id: str) -> list[str]:
    """The commands of a study's jobs table (``posym <study> <command>``), none where it has no table."""
    from posym import registry

    table = registry.study_module(study_id, "jobs")
    return [f"{study_id} {job.name}" for job in (table.JOBS if table else ())]


def notebook_modules(path: Path | str) -> set[str]:
    """The posym modules a notebook's code cells import (lines of IPython magics and shell escapes left out)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    found = set()
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError as err:
            raise CodeError(f"{path}: a code cell does not parse as Python ({err.msg}, line {err.lineno})") from None
        found |= _imports([tree], "__notebook__", False)
    return found


def command_code(command: str, notebook: str | None = None) -> Fingerprint:
    """The code of a job that runs ``posym <command>``; for ``posym notebook``, with the modules ``notebook``
    (its source file) imports. Its digest is :func:`stable_digest`'s."""
    own = function_code(command_entry(command)).modules
    extra = {}
    key = command
    if notebook:
        path = Path(notebook)
        found = _known(f"notebook {path.resolve()}", path, lambda: {"imports": sorted(notebook_modules(path))})
        extra = closure(found["imports"])
        key = f"{command} {_portable(path)}"
    modules = dict(sorted({**own, **extra}.items()))
    digest = stable_digest(key, definitions(modules))
    _save_cache()
    return Fingerprint(digest, modules)


def _portable(path: Path) -> str:
    """A notebook's path inside the package where it is there (a moved checkout keeps its keys), else as given."""
    try:
        return path.resolve().relative_to(PACKAGE).as_posix()
    except ValueError:
        return str(path)


def stable_digest(key: str, parts: Mapping[str, str]) -> str:
    """The digest of the code ``parts`` of command ``key``, unchanged while every part it was made of stays as it
    was: a definition added beside them (a new task module, a new position scheme's class, a new variants module)
    changes no job's behaviour, so it reruns nothing; a changed or removed one gives a new digest.

    The parts of the last :data:`KEPT_STATES` digests of each command are kept with the module facts
    (:func:`use_cache`), the newest first, so that an edit undone (a dry run made with it included) finds its
    digest again: the newest kept state whose parts all stand unchanged gives its digest. Without a kept state a
    digest is the hash of the parts as they are, so a results folder whose kept facts are lost reruns each job
    once (or ``--touch``). A definition that is added under a name another definition already reached by lookup (a
    second registration of an existing scheme's name) is a change this cannot see."""
    parts = dict(sorted(parts.items()))
    states = _facts.setdefault("digests", {}).setdefault(key, [])
    found = next((state for state in states if all(parts.get(n) == d for n, d in state["parts"].items())), None)
    digest = found["digest"] if found else _hash(json.dumps(parts, sort_keys=True))
    if not states or states[0]["parts"] != parts or states[0]["digest"] != digest:
        # The state the parts were found in is superseded by the same digest with the added parts, so that a later
        # change of an added part (a new task's module, once its jobs ran) is a change.
        rest = [state for state in states if state is not found and state["parts"] != parts]
        _facts["digests"][key] = [{"digest": digest, "parts": parts}, *rest][:KEPT_STATES]
        _cache["changed"] = True
    return digest


#: The commands whose code each mark :func:`shell_mark` made carries, for :func:`check_rule`.
_marked: dict[str, set[str]] = {}
MARK = re.compile(r": posym code [0-9a-f]{%d}; " % DIGITS)


def shell_mark(command: str, notebook: str | None = None) -> str:
    """The start of a rule's shell command that carries the code fingerprint of its job: a no-op (``:``) the shell
    skips, in the text Snakemake's ``code`` trigger compares, and in the log of the command a job ran."""
    mark = f": posym code {command_code(command, notebook).digest}; "
    _marked.setdefault(mark, set()).add(command)
    return mark


def check_rule(rule: str, shell: str | None, job: object = None) -> None:
    """Refuse a rule whose code fingerprint is missing or is another command's than the one it runs.

    ``shell``: the rule's shell command as written (None: a rule that runs nothing, such as ``all``); ``job``: its
    ``params.job``, where it has one (posym.pipeline.jobs.rule_params, which names its command). A rule names its
    command twice, in ``code(...)`` and in its params or shell text, and a typo in one would make its jobs rerun on
    another command's code edits and never on their own; this compares the two when the workflow is read.
    """
    if shell is None:
        return
    found = MARK.match(shell)
    if found is None:
        raise CodeError(
            f"rule {rule}: its shell command does not start with code(...) (posym.pipeline.code.shell_mark), so its jobs "
            "would not rerun when the code they run changes"
        )
    marked = _marked.get(found.group(), set())
    command = getattr(job, "command", None)
    if command is not None:
        runs = command in marked
    else:  # the command is in the shell text: posym <command> after the mark, or after a ( or ; within it
        command = next((c for c in sorted(marked) if re.search(rf"(^|[(;]\s*)posym {re.escape(c)} ", shell[found.end():])), None)
        runs = command is not None
    if not runs:
        raise CodeError(
            f"rule {rule}: its shell starts with the code of posym {' / '.join(sorted(marked)) or '(unknown)'} but it runs "
            f"posym {command or '(not found in its shell command)'}: give code(...) the command the rule runs"
        )


def changed_modules(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, list[str]]:
    """Modules (and entry functions) whose code changed, was added or removed between two ``modules`` maps."""
    return {
        "changed": sorted(m for m in before.keys() & after.keys() if before[m] != after[m]),
        "added": sorted(after.keys() - before.keys()),
        "removed": sorted(before.keys() - after.keys()),
    }
