"""The learned ranker: a LightGBM lambdarank model over the candidates' features (pipelines/features.py),
shipped in the package as one JSON file (`MODEL_PATH`) that eval/train_ranker.py writes.

Its raw scores order the candidates; what it returns are those scores turned into a probability over the
request's candidates (a softmax), so that each candidate's score says how likely it is to be the answer
and a ratio to the best means the same on every query. The payload's cuts read those ratios.

The file holds the booster (LightGBM's own text format, what the training tools read), its ONNX twin (the same
trees as one TreeEnsembleRegressor graph, which a search scores with), the feature names it was trained on
(checked against FEATURES when loaded: a model trained on other features is refused, never silently misread)
and how it was made. A search scores through onnxruntime, which the query embedder loads anyway, and never
imports LightGBM: its import pulls in scikit-learn for its estimator classes, seconds of every process's start
(eval/RESULTS.md, "the learned ranker scored through its ONNX twin").
"""

from __future__ import annotations

import base64
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Sequence

from coderag.base.errors import CodeRagError
from coderag.pipelines.features import FEATURES

MODEL_PATH = Path(__file__).resolve().parent / "ranker_model.json"
# The payload's cuts, as ratios to the best candidate's probability, read off the model's probabilities on
# the held-out repositories' commit queries (the calibration table `coderag train-ranker` prints;
# eval/RESULTS.md): below 0.05 of the best lie about one in twenty of the chunks that hold a gold line, so
# results under it are dropped before packing; when the best chunk of a second file scores half the best or
# more, the first file is right about half the time or less, so the payload lists more candidate places
# rather than fewer long blocks; below 0.02 of the best lie 2% of the gold chunks: not worth a candidate line.
LEARNED_CUT_RATIO = 0.05
LEARNED_FLAT_RATIO = 0.5
LEARNED_FLOOR_RATIO = 0.02


_WAYS_ON = ("Reinstall coderag (the model ships in its package), or set retrieval.ranker: rules; a model of your "
            "own is rebuilt from mined data with `coderag train-ranker --data DIR` (eval/README.md).")


class RankerModelError(CodeRagError):
    """The ranker's model file is missing, unreadable or made for other features."""


class LearnedRanker:
    """Scores the rows of FEATURES of one request's candidates, through the model's ONNX twin (`onnx_twin`)."""

    def __init__(self, onnx_model: bytes, info: dict) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1  # tens of rows a request: a thread pool costs more than it saves
        so.inter_op_num_threads = 1
        self._session = ort.InferenceSession(onnx_model, so, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name
        self.info = info

    @property
    def n_features(self) -> int:
        """How many features a row must have: the width of the graph's input."""
        return int(self._session.get_inputs()[0].shape[1])

    def raw_scores(self, rows: Sequence[Sequence[float]]) -> List[float]:
        import numpy as np

        if not rows:
            return []
        out = self._session.run(None, {self._input: np.asarray(rows, dtype=np.float64)})[0]
        return out.ravel().tolist()

    def scores(self, rows: Sequence[Sequence[float]]) -> List[float]:
        """Each candidate's probability of being the answer among this request's candidates."""
        raw = self.raw_scores(rows)
        if not raw:
            return []
        top = max(raw)
        exp = [math.exp(s - top) for s in raw]
        total = sum(exp)
        return [e / total for e in exp]


def onnx_twin(booster: Any) -> bytes:
    """A LightGBM booster's trees as a serialized ONNX graph (onnxmltools' converter, a TreeEnsembleRegressor)
    that takes rows of float64 features and gives the booster's raw scores. The graph holds the split
    thresholds as float32, so a feature within float32 rounding of a threshold may take the other branch: rare
    enough that no request's order changed where it was checked (eval/RESULTS.md, "the learned ranker scored
    through its ONNX twin"), and a test holds the two to the same scores."""
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import DoubleTensorType

    graph = convert_lightgbm(booster, initial_types=[("features", DoubleTensorType([None, booster.num_feature()]))],
                             zipmap=False)
    return graph.SerializeToString()


def blend(fused: Dict[str, float], probs: Dict[str, float], share: float) -> Dict[str, float]:
    """The blend's order, on the fusion's scale: candidates ordered by each fused score to the power 1 - `share`
    times its probability (`probs`, by the same keys) to the power `share` (a weighted geometric mean, so
    neither side alone decides), and given the fused scores, best first, in that order. The payload's ratios
    (its cut, when it is unsure, which places are worth a line) were set on the fused scores' spread; handed
    out this way, they see the same spread whatever the order. Unchanged when either side has no evidence.

    >>> blend({"a": 0.9, "b": 0.6, "c": 0.3}, {"a": 0.1, "b": 0.8, "c": 0.1}, 0.5)
    {'b': 0.9, 'a': 0.6, 'c': 0.3}
    """
    if max(fused.values(), default=0.0) <= 0.0 or max(probs.values(), default=0.0) <= 0.0:
        return fused
    mixed = {key: max(score, 0.0) ** (1.0 - share) * probs.get(key, 0.0) ** share for key, score in fused.items()}
    order = sorted(mixed, key=mixed.__getitem__, reverse=True)
    return dict(zip(order, sorted(fused.values(), reverse=True)))


@lru_cache(maxsize=4)
def load_ranker(path: Path = MODEL_PATH) -> LearnedRanker:
    """The model at `path`, loaded once per process. A file written before models carried their ONNX twin
    gets one made from its booster here (that once imports LightGBM)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RankerModelError(f"Cannot read the ranker model {path}: {exc}. {_WAYS_ON}") from exc
    if list(doc.get("features", [])) != list(FEATURES):
        raise RankerModelError(f"The ranker model {path} was trained on other features than this coderag computes. "
                               f"{_WAYS_ON}")
    try:
        if "onnx" in doc:
            graph = base64.b64decode(doc["onnx"], validate=True)
        else:
            import lightgbm as lgb

            graph = onnx_twin(lgb.Booster(model_str=doc["booster"]))
        return LearnedRanker(graph, doc.get("info", {}))
    except Exception as exc:  # a damaged twin or booster: onnxruntime and LightGBM each raise their own errors
        raise RankerModelError(f"Cannot read the ranker model {path}: {exc}. {_WAYS_ON}") from exc


def save_model(booster: Any, path: Path, info: dict) -> Path:
    """Write `booster`, its ONNX twin and `info` as a model file (atomically: a search never reads half a
    file)."""
    path = Path(path)
    doc = {"features": list(FEATURES), "info": info, "booster": booster.model_to_string(),
           "onnx": base64.b64encode(onnx_twin(booster)).decode("ascii")}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    tmp.replace(path)
    load_ranker.cache_clear()
    return path
