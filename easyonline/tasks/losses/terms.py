"""A config ``Loss`` (EasyRec's ``losses { loss_type weight ... <param> {...} }``) as a weighted loss function.

``loss_term`` checks the entry (a supported type, parameters that belong to it, sensible values) and binds its
parameters, giving a ``LossTerm``: tasks/from_config.py ``make_task`` builds a task of its terms, whose loss is
sum(weight_i * loss_i). The kind of task a loss makes (binary or regression) is features/label_kinds.py's.
"""
import dataclasses
import functools
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from easyonline.core.errors import ConfigError
from easyonline.features.label_kinds import loss_kind
from easyonline.protos import pipeline_pb2
from easyonline.tasks.losses.cross_entropy import classification_loss
from easyonline.tasks.losses.f1_reweighted import f1_reweighted_loss
from easyonline.tasks.losses.focal import binary_focal_loss
from easyonline.tasks.losses.jrc import jrc_loss
from easyonline.tasks.losses.pairwise import pairwise_focal_loss, pairwise_logistic_loss, pairwise_loss
from easyonline.tasks.losses.squared_error import l2_loss

LossType = pipeline_pb2.LossType


@dataclasses.dataclass(frozen=True)
class LossTerm:
    """One of a task's losses: ``fn(labels, logits, weights, sessions)`` times ``weight``; ``session_feature``
    names the feature whose values are the samples' session ids ("" none)."""
    name: str
    weight: float
    fn: Callable
    kind: str  # "binary" or "regression" (features/label_kinds.py)
    session_feature: str = ""
    num_class: int = 1  # logits per sample it takes (JRC: 2)


def _optional(param: Any, field: str) -> Optional[float]:
    return getattr(param, field) if param.HasField(field) else None


def _f1(param: Any) -> Dict:
    return dict(f1_beta_square=param.f1_beta_square, label_smoothing=param.label_smoothing)


def _focal(param: Any) -> Dict:
    return dict(gamma=param.gamma, alpha=_optional(param, "alpha"), ohem_ratio=param.ohem_ratio,
                label_smoothing=param.label_smoothing)


def _pairwise(param: Any) -> Dict:
    return dict(margin=param.margin, temperature=param.temperature)


def _pairwise_logistic(param: Any) -> Dict:
    return dict(temperature=param.temperature, hinge_margin=_optional(param, "hinge_margin"),
                ohem_ratio=param.ohem_ratio, use_label_margin=param.use_label_margin)


def _pairwise_focal(param: Any) -> Dict:
    return dict(gamma=param.gamma, alpha=_optional(param, "alpha"), hinge_margin=_optional(param, "hinge_margin"),
                ohem_ratio=param.ohem_ratio, temperature=param.temperature)


def _jrc(param: Any) -> Dict:
    return dict(alpha=param.alpha, same_label_loss=param.same_label_loss)


# loss type: (function, its parameter field in Loss ("" none), the parameters from that message, logits per sample)
_LOSSES: Dict[int, Tuple[Callable[..., Any], str, Optional[Callable[[Any], Dict]], int]] = {
    LossType.CLASSIFICATION: (classification_loss, "", None, 1),
    LossType.BINARY_CROSS_ENTROPY_LOSS: (classification_loss, "", None, 1),
    LossType.L2_LOSS: (l2_loss, "", None, 1),
    LossType.F1_REWEIGHTED_LOSS: (f1_reweighted_loss, "f1_reweighted_loss", _f1, 1),
    LossType.BINARY_FOCAL_LOSS: (binary_focal_loss, "binary_focal_loss", _focal, 1),
    LossType.PAIR_WISE_LOSS: (pairwise_loss, "pairwise_loss", _pairwise, 1),
    LossType.PAIRWISE_LOGISTIC_LOSS: (pairwise_logistic_loss, "pairwise_logistic_loss", _pairwise_logistic, 1),
    LossType.PAIRWISE_FOCAL_LOSS: (pairwise_focal_loss, "pairwise_focal_loss", _pairwise_focal, 1),
    LossType.JRC_LOSS: (jrc_loss, "jrc_loss", _jrc, 2),
}
SUPPORTED = tuple(_LOSSES)
# EasyRec's names of a loss without loss_name (rank_model.py _build_loss_impl); the others: the type in lower case
_DEFAULT_NAMES = {LossType.CLASSIFICATION: "cross_entropy_loss", LossType.BINARY_CROSS_ENTROPY_LOSS: "cross_entropy_loss",
                  LossType.L2_LOSS: "l2_loss"}


def loss_term(loss: pipeline_pb2.Loss, where: str) -> LossTerm:
    """The term of ``loss`` (``where``: its config field, e.g. ``model_config.losses[1]``, named in errors)."""
    if loss.loss_type not in _LOSSES:
        names = [LossType.Name(t) for t in SUPPORTED]
        raise ConfigError(f"{where}.loss_type", f"{LossType.Name(loss.loss_type)} is not supported; use one of {names}")
    fn, field, read, num_class = _LOSSES[loss.loss_type]
    given = loss.WhichOneof("loss_param")
    if given is not None and given != field:
        raise ConfigError(f"{where}.{given}", f"parameters of another loss than {LossType.Name(loss.loss_type)}"
                          + (f" (its parameters are {field})" if field else " (it takes none)"))
    if loss.learn_loss_weight:
        raise ConfigError(f"{where}.learn_loss_weight", "EasyRec's uncertainty weighting (learn_loss_weight with "
                          "loss_weight_strategy: Uncertainty) is not supported; set the loss's weight instead")
    if loss.weight < 0:
        raise ConfigError(f"{where}.weight", f"must be >= 0, got {loss.weight}")
    param = getattr(loss, field) if field else None
    params = read(param) if read is not None else {}
    _check(params, f"{where}.{field}")
    session = ""
    if param is not None and "session_name" in param.DESCRIPTOR.fields_by_name:
        session = param.session_name
    if loss.loss_type == LossType.JRC_LOSS:
        if not session:
            raise ConfigError(f"{where}.jrc_loss.session_name", "JRC_LOSS needs the feature whose values are the "
                              "samples' sessions (e.g. user_id)")
        if param is not None and param.loss_weight_strategy != "fixed":
            raise ConfigError(f"{where}.jrc_loss.loss_weight_strategy",
                              f"only 'fixed' is supported, got {param.loss_weight_strategy!r}")
    name = loss.loss_name or _DEFAULT_NAMES.get(loss.loss_type, LossType.Name(loss.loss_type).lower())
    return LossTerm(name, loss.weight, functools.partial(fn, **params) if params else fn, loss_kind(loss.loss_type),
                    session, num_class)


def _check(params: Dict, where: str) -> None:
    """EasyRec's asserts, as ConfigErrors."""
    if "ohem_ratio" in params and not 0 < params["ohem_ratio"] <= 1:
        raise ConfigError(f"{where}.ohem_ratio", f"must be in (0, 1], got {params['ohem_ratio']}")
    if "gamma" in params and params["gamma"] < 0:
        raise ConfigError(f"{where}.gamma", f"must be >= 0, got {params['gamma']}")
    if "temperature" in params and params["temperature"] <= 0:
        raise ConfigError(f"{where}.temperature", f"must be > 0, got {params['temperature']}")
    if "label_smoothing" in params and not 0 <= params["label_smoothing"] < 1:
        raise ConfigError(f"{where}.label_smoothing", f"must be in [0, 1), got {params['label_smoothing']}")
    if "alpha" in params and params["alpha"] is not None and not 0 <= params["alpha"] <= 1:
        raise ConfigError(f"{where}.alpha", f"must be in [0, 1], got {params['alpha']}")


def terms_loss(terms: Sequence[LossTerm], labels: Any, logits: Any, weights: Any = None,
               features: Optional[Mapping] = None) -> Any:
    """sum(weight_i * loss_i) of a task's terms on a batch (``weights``: the samples' weights, or None;
    ``features``: the batch's by name, where a term's session ids are)."""
    total = None
    for term in terms:
        sessions = None
        if term.session_feature:
            if features is None or term.session_feature not in features:
                raise ValueError(f"loss {term.name!r} needs feature {term.session_feature!r} (its session ids)")
            sessions = features[term.session_feature]
        value = term.fn(labels, logits, weights, sessions)
        value = value if term.weight == 1.0 else term.weight * value
        total = value if total is None else total + value
    return total
