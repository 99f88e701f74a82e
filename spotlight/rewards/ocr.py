"""Flow-GRPO's OCR reward: Tesseract reads each image; edit distance to the quoted text."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import string
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps
from rapidfuzz.distance import Levenshtein

from spotlight.rewards.simple import check_images
from spotlight.tasks.text import normalize

UPPERCASE = string.ascii_uppercase
"""The whitelist for prompts whose targets are uppercase Latin letters (``whitelist=UPPERCASE``)."""

INSTALL_HINT = (
    "install Tesseract OCR with its English data: `apt-get install tesseract-ocr` "
    "(Debian/Ubuntu), `dnf install tesseract` (Fedora), `brew install tesseract` (macOS)"
)
TESSDATA_DIRS = (
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)
"""Where OS packages put ``*.traineddata``; searched after ``tessdata=`` and $TESSDATA_PREFIX."""

BACKENDS = ("auto", "tesserocr", "cli")
_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
_QUOTED = re.compile(r'"([^"]*)"|“([^”]*)”')


def levenshtein(a: str, b: str) -> int:
    """The edit distance between ``a`` and ``b``: fewest insertions, deletions, substitutions
    (rapidfuzz's C++ implementation)."""
    return Levenshtein.distance(a, b)


def quoted_target(prompt: str) -> str:
    """The normalized text between the first pair of double quotes of ``prompt``.

    Straight (``"QXF"``) and curly (``“QXF”``) quotes both count.

    Raises:
        ValueError: the prompt has no quoted text, or only whitespace between its quotes.
    """
    match = _QUOTED.search(prompt)
    target = normalize(next(g for g in match.groups() if g is not None)) if match else ""
    if not target:
        raise ValueError(
            f"OcrReward: prompt {prompt!r} has no text between double quotes to score; "
            "OCR prompts name their text in quotes, e.g. 'a sign that says \"QXF\"'"
        )
    return target


def ocr_score(recognised: str, target: str) -> float:
    """Flow-GRPO's OCR score of ``recognised`` text against ``target`` (see ``OcrReward``)."""
    recognised, target = normalize(recognised), normalize(target)
    if not target:
        raise ValueError("ocr_score: the target text is empty")
    if not recognised:
        return 0.0
    if target in recognised:
        return 1.0
    return 1.0 - min(levenshtein(recognised, target), len(target)) / len(target)


THRESHOLD_TOLERANCE = 1e-6
"""Scores within this of a threshold reach it (2/3 is not exact in floating point)."""


def binarize(scores: np.ndarray, threshold: float) -> np.ndarray:
    """1.0 where a graded OCR score reaches ``threshold``, else 0.0 (the binary rewards)."""
    return (np.asarray(scores, np.float64) >= threshold - THRESHOLD_TOLERANCE).astype(np.float64)


def prepare(
    image: np.ndarray, scale: int = 3, resample: str = "bicubic", border: int = 8
) -> Image.Image:
    """One uint8 ``(H, W, 1|3)`` image as Tesseract reads it best: a grayscale PIL image.

    Dark text on a light background (inverted when the median pixel is dark, since text covers
    less than half of a sign), upscaled ``scale`` times with ``resample``, then padded on each
    side with ``border`` source pixels of the background's (median) gray.
    """
    gray = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).convert("L")
    background = int(np.median(np.asarray(gray)))
    if background < 128:
        gray, background = ImageOps.invert(gray), 255 - background
    if scale > 1:
        gray = gray.resize((gray.width * scale, gray.height * scale), _RESAMPLE[resample])
    return ImageOps.expand(gray, border=border * max(scale, 1), fill=background)


def render_text(
    text: str,
    height: int = 32,
    width: int = 64,
    size: int = 20,
    ink: int = 0,
    paper: int = 255,
) -> np.ndarray:
    """A clean uint8 ``(height, width, 1)`` render of ``text``, centred, in Pillow's bundled font.

    The reference the reward is calibrated on: size 20 fits three capitals ("WWW") in 64 px.
    """
    image = Image.new("L", (width, height), paper)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=size)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    xy = ((width - (right - left)) / 2 - left, (height - (bottom - top)) / 2 - top)
    draw.text(xy, text, fill=ink, font=font)
    return np.asarray(image)[..., None]


@dataclass(frozen=True)
class TesseractOptions:
    """How Tesseract reads: page segmentation, language, allowed characters, trust threshold."""

    psm: int = 7
    lang: str = "eng"
    whitelist: str | None = None
    dpi: int = 300
    min_confidence: float = 0.0
    """Words of confidence (0-100) at or below this are dropped, like Flow-GRPO's ``score > 0``."""

    def variables(self) -> dict[str, str]:
        """Tesseract variables (``-c name=value``) these options set."""
        out = {"user_defined_dpi": str(self.dpi)}
        if self.whitelist:
            out["tessedit_char_whitelist"] = self.whitelist
        return out


class TesserocrEngine:
    """In-process Tesseract through tesserocr: one ``PyTessBaseAPI`` per calling thread."""

    def __init__(self, options: TesseractOptions, tessdata: str):
        import tesserocr

        self._tesserocr, self.options = tesserocr, options
        self.tessdata = tessdata.rstrip("/\\") + os.sep
        self._local = threading.local()
        self._apis: list[Any] = []
        self._lock = threading.Lock()
        self._api()  # fail now, in the constructor, if the data cannot be loaded

    def _api(self) -> Any:
        api = getattr(self._local, "api", None)
        if api is None:
            tr, opts = self._tesserocr, self.options
            try:
                api = tr.PyTessBaseAPI(path=self.tessdata, lang=opts.lang, psm=opts.psm)
            except RuntimeError as e:
                raise RuntimeError(
                    f"Tesseract could not load language {opts.lang!r} from {self.tessdata}: {e}"
                ) from e
            for name, value in opts.variables().items():
                api.SetVariable(name, value)
            self._local.api = api
            with self._lock:
                self._apis.append(api)
        return api

    def read(self, images: Sequence[Image.Image]) -> list[str]:
        """The text of each image (words above ``min_confidence``, joined by spaces)."""
        api, level = self._api(), self._tesserocr.RIL.WORD
        texts = []
        for image in images:
            api.SetImageBytes(image.tobytes(), image.width, image.height, 1, image.width)
            api.SetSourceResolution(self.options.dpi)
            api.Recognize()
            words, it = [], api.GetIterator()
            for word in self._tesserocr.iterate_level(it, level) if it is not None else ():
                if word.Confidence(level) > self.options.min_confidence:
                    words.append(_word_text(word, level))
            texts.append(" ".join(words))
        return texts

    def close(self) -> None:
        """Free every thread's Tesseract instance."""
        with self._lock:
            for api in self._apis:
                api.End()
            self._apis.clear()
        self._local = threading.local()


def _word_text(word: Any, level: int) -> str:
    """A tesserocr iterator's word, or "" where it has none (tesserocr raises there)."""
    try:
        return word.GetUTF8Text(level)
    except RuntimeError:
        return ""


class CliEngine:
    """The ``tesseract`` command: one process per call of ``read``, over a list of image files."""

    def __init__(
        self,
        options: TesseractOptions,
        command: str = "tesseract",
        tessdata: str | None = None,
        timeout_s: float = 600.0,
    ):
        path = shutil.which(command)
        if path is None:
            raise FileNotFoundError(
                f"OcrReward: the Tesseract binary {command!r} was not found; {INSTALL_HINT}, "
                "or pass tesseract_cmd='/path/to/tesseract'"
            )
        self.command, self.options = path, options
        self.tessdata, self.timeout_s = tessdata, timeout_s

    def _argv(self, list_file: Path) -> list[str]:
        opts = self.options
        argv = [self.command, str(list_file), "stdout", "-l", opts.lang, "--psm", str(opts.psm)]
        if self.tessdata:
            argv += ["--tessdata-dir", self.tessdata]
        for name, value in opts.variables().items():
            argv += ["-c", f"{name}={value}"]
        return [*argv, "tsv"]

    def read(self, images: Sequence[Image.Image]) -> list[str]:
        """The text of each image (words above ``min_confidence``, joined by spaces)."""
        if not images:
            return []
        with tempfile.TemporaryDirectory(prefix="spotlight-ocr-") as folder:
            paths = [Path(folder) / f"{i:05d}.png" for i in range(len(images))]
            for image, path in zip(images, paths, strict=True):
                image.save(path, compress_level=1)
            list_file = Path(folder) / "images.txt"
            list_file.write_text("".join(f"{p}\n" for p in paths))
            tsv = self._run(self._argv(list_file), len(images))
        return parse_tsv(tsv, len(images), self.options.min_confidence)

    def _run(self, argv: list[str], count: int) -> str:
        # one OpenMP thread per process: parallelism comes from OcrReward's workers
        env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        timer = threading.Timer(self.timeout_s, proc.kill)  # no Popen timeout: it polls w/ sleep
        timer.start()
        try:
            out, err = proc.communicate()
        finally:
            timer.cancel()
        if proc.returncode != 0:
            why = f"was killed after {self.timeout_s} s" if proc.returncode < 0 else "failed"
            raise RuntimeError(
                f"tesseract {why} on {count} images (exit {proc.returncode}): {err[-2000:]}"
            )
        return out

    def close(self) -> None:
        """Nothing to free: each call's process has exited."""


def parse_tsv(tsv: str, count: int, min_confidence: float) -> list[str]:
    """Per-page text from Tesseract's TSV output over ``count`` pages (1-based ``page_num``)."""
    words: list[list[str]] = [[] for _ in range(count)]
    for line in tsv.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) < 12 or fields[0] != "5":
            continue
        page, conf, text = int(fields[1]), float(fields[10]), fields[11]
        if not 1 <= page <= count:
            raise RuntimeError(f"tesseract reported page {page} of a {count}-image list")
        if text.strip() and conf > min_confidence:
            words[page - 1].append(text)
    return [" ".join(w) for w in words]


def find_tessdata(lang: str, tessdata: str | None, tesseract_cmd: str = "tesseract") -> str:
    """The folder holding ``{lang}.traineddata``: ``tessdata``, $TESSDATA_PREFIX, the binary's own
    data folder, then ``TESSDATA_DIRS``.

    Raises:
        FileNotFoundError: none holds it; the message says how to install it.
    """
    if tessdata is not None:
        candidates = [tessdata]
    else:
        prefix = os.environ.get("TESSDATA_PREFIX")
        found = [prefix, str(Path(prefix) / "tessdata")] if prefix else []
        candidates = [*found, *_binary_tessdata(tesseract_cmd), *TESSDATA_DIRS]
    for folder in candidates:
        if (Path(folder) / f"{lang}.traineddata").is_file():
            return str(folder)
    raise FileNotFoundError(
        f"OcrReward: no {lang}.traineddata in {', '.join(map(str, candidates))}; {INSTALL_HINT} "
        "(other languages: tesseract-ocr-LANG), or pass tessdata='/path/to/tessdata'"
    )


def _binary_tessdata(command: str) -> list[str]:
    """The data folder that ``tesseract --list-langs`` names, if that binary exists."""
    path = shutil.which(command)
    if path is None:
        return []
    try:
        out = subprocess.run([path, "--list-langs"], capture_output=True, text=True, check=False)
    except OSError:
        return []
    match = re.search(r'"([^"]+)"', out.stdout + out.stderr)
    return [match.group(1)] if match else []


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


class OcrReward:
    """Flow-GRPO's OCR reward: does the image show the text quoted in its prompt?

    With ``t`` the prompt's text between double quotes and ``r`` what Tesseract reads in the
    image, both lowercased with all whitespace removed::

        reward = 0                                              if r is empty
               = 1                                              if t is a substring of r
               = 1 - min(Levenshtein(r, t), len(t)) / len(t)    otherwise

    With ``threshold`` set the reward is binary: 1 where the score above reaches ``threshold``,
    else 0 (``ocr-exact``: 1.0, GenEval's strict style, the word read exactly; ``ocr-2of3``:
    2/3, at most one letter wrong on a 3-letter word; ``ocr-1of3``: 1/3, one letter right).

    ``r`` keeps only words Tesseract is more than ``min_confidence`` sure of (Flow-GRPO keeps
    PaddleOCR words of score > 0; Tesseract's guess on a blank image has confidence 0).

    Each image is made grayscale, dark-on-light, upscaled and padded (``prepare``), then read as
    one text line (``psm=7``; the single-word mode 8 drops leading letters of short uppercase
    words). Images are split into ``workers`` contiguous chunks read in parallel threads: the
    ``tesserocr`` backend keeps one Tesseract instance per thread (no process per image); the
    ``cli`` backend runs one ``tesseract`` process per chunk over a list of image files.

    Args:
        backend: "tesserocr" (in-process, needs the tesserocr wheel), "cli" (the ``tesseract``
            binary), or "auto": tesserocr when it is installed, else the binary.
        workers: parallel readers; default: the CPUs this process may use (under Ray, pass the
            CPUs reserved for the reward actor).
        scale: upscaling factor before OCR; resample: "nearest", "bilinear", "bicubic" or
            "lanczos"; border: background padding per side, in source pixels. 3x bicubic reads
            32x64 signs best overall and faster than 4x (benchmarks/ocr_reward.py).
        psm: Tesseract page segmentation mode.
        whitelist: characters Tesseract may output, e.g. ``UPPERCASE``; None (recommended)
            allows all. Only for prompt sets whose targets use nothing else; on clean renders of
            uppercase words it reads no better (benchmarks/ocr_reward.py).
        min_confidence: words of Tesseract confidence (0-100) at or below it are ignored.
        threshold: None for the graded score; a value in (0, 1] for the binary reward
            ``score >= threshold``.
        lang: Tesseract language; tessdata: folder of ``{lang}.traineddata`` (default: found).
        tesseract_cmd: the "cli" backend's binary; timeout_s: its limit per process (chunk).

    Raises:
        FileNotFoundError: the binary or the language data is missing (says how to install).
        ImportError: backend="tesserocr" but tesserocr is not installed.
    """

    def __init__(
        self,
        *,
        backend: str = "auto",
        workers: int | None = None,
        scale: int = 3,
        resample: str = "bicubic",
        border: int = 8,
        psm: int = 7,
        whitelist: str | None = None,
        min_confidence: float = 0.0,
        lang: str = "eng",
        tessdata: str | None = None,
        tesseract_cmd: str = "tesseract",
        timeout_s: float = 600.0,
        threshold: float | None = None,
    ):
        self._config = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        _check_args(backend, workers, scale, resample, border)
        if threshold is not None and not 0 < threshold <= 1:
            raise ValueError(f"OcrReward: threshold must be in (0, 1] or None, got {threshold}")
        self.threshold = threshold
        self.options = TesseractOptions(psm, lang, whitelist, 300, min_confidence)
        self.scale, self.resample, self.border = scale, resample, border
        self.workers = workers or available_cpus()
        if backend == "auto":
            backend = "tesserocr" if importlib.util.find_spec("tesserocr") else "cli"
        self.backend = backend
        if backend == "tesserocr":
            _require_tesserocr()
            data = find_tessdata(lang, tessdata, tesseract_cmd)
            self._engine: TesserocrEngine | CliEngine = TesserocrEngine(self.options, data)
        else:
            self._engine = CliEngine(self.options, tesseract_cmd, tessdata, timeout_s)
        self._pool: ThreadPoolExecutor | None = None

    def __call__(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        check_images(images, prompts, "OcrReward")
        targets = [quoted_target(p) for p in prompts]
        texts = self.read(images)
        scores = np.array([ocr_score(r, t) for r, t in zip(texts, targets, strict=True)])
        if self.threshold is not None:
            scores = binarize(scores, self.threshold)
        return scores.astype(np.float32)

    def read(self, images: np.ndarray) -> list[str]:
        """What Tesseract reads in each uint8 ``(H, W, 1|3)`` image of the batch."""
        chunks = np.array_split(np.arange(len(images)), min(self.workers, len(images)) or 1)
        chunks = [c for c in chunks if len(c)]

        def read_chunk(index: np.ndarray) -> list[str]:
            prep = [prepare(images[i], self.scale, self.resample, self.border) for i in index]
            return self._engine.read(prep)

        if len(chunks) <= 1:
            return read_chunk(chunks[0]) if chunks else []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ocr")
        return [text for chunk in self._pool.map(read_chunk, chunks) for text in chunk]

    def close(self) -> None:
        """Stop the worker threads and free Tesseract; the reward may still be called after."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._engine.close()

    def __enter__(self) -> OcrReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._config)  # picklable (Ray): threads and Tesseract are rebuilt

    def __setstate__(self, config: dict[str, Any]) -> None:
        self.__init__(**config)


def _check_args(backend: str, workers: int | None, scale: int, resample: str, border: int) -> None:
    """Raise ValueError naming the first invalid constructor argument."""
    checks: list[tuple[bool, str]] = [
        (backend in BACKENDS, f"backend must be one of {BACKENDS}, got {backend!r}"),
        (workers is None or workers >= 1, f"workers must be >= 1, got {workers}"),
        (isinstance(scale, int) and scale >= 1, f"scale must be an int >= 1, got {scale!r}"),
        (resample in _RESAMPLE, f"resample must be one of {sorted(_RESAMPLE)}, got {resample!r}"),
        (border >= 0, f"border must be >= 0, got {border}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"OcrReward: {message}")


def _require_tesserocr() -> None:
    if importlib.util.find_spec("tesserocr") is None:
        raise ImportError(
            "OcrReward(backend='tesserocr') needs tesserocr: `pip install tesserocr==2.13.0` "
            "(a wheel that bundles libtesseract; it still needs the OS package's language data), "
            "or use backend='cli'"
        )
