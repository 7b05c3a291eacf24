"""EasyRec's contrastive learning layers of a backbone (CL4SRec, Xie et al. 2022; its ``cl4srec_on_taobao``
sample): ``SeqAugment`` makes random views of a behaviour sequence, ``AuxiliaryLoss`` adds a loss that pulls a
sample's two views together and pushes other samples' apart. Both act in training only: the views feed the
extra loss, never the scores, so serving and the prequential scores are unchanged by them."""
from typing import TYPE_CHECKING, Any, Sequence, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.base import SequenceInput
from easyonline.protos import pipeline_pb2

if TYPE_CHECKING:
    from google.protobuf import struct_pb2

tf = ensure_legacy_keras()

LOSS_TYPES = ("nce_loss", "info_nce", "l2_loss")


class SeqAugment(tf.keras.layers.Layer):
    """``call(SequenceInput, training)``: in training each sample's sequence (its first ``length`` positions)
    becomes one of, drawn at random among those enabled: a crop (a run of floor(length * crop_rate) positions,
    moved to the front; enabled when crop_rate < 1), a mask (floor(length * mask_rate) positions replaced by a
    learnt mask vector; mask_rate > 0) or a reorder (a run of floor(length * reorder_rate) positions shuffled;
    reorder_rate > 0), as EasyRec's ``data_augment.py``. Outside training the input is returned as it is."""

    def __init__(self, settings: pipeline_pb2.SequenceAugment, width: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.width = width
        self.mask = None

    def build(self, input_shape: Any) -> None:  # (None when call builds it)
        self.mask = self.add_weight(name="mask", shape=[1, self.width], initializer="glorot_uniform")
        super().build(input_shape)

    def call(self, inputs: SequenceInput, training: Any = False) -> SequenceInput:  # pylint: disable=arguments-differ
        if not self.built:
            self.build(None)
        if not training:
            return inputs
        augmented, lengths = tf.map_fn(lambda x: self._augment(x[0], x[1]),
                                       (inputs.sequence, tf.cast(inputs.lengths, tf.int32)),
                                       fn_output_signature=(tf.float32, tf.int32))
        return SequenceInput(inputs.keys, tf.reshape(augmented, tf.shape(inputs.sequence)),
                             tf.cast(lengths, inputs.lengths.dtype), None)

    def _augment(self, sequence: tf.Tensor, length: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        size = tf.shape(sequence)[0]
        real = tf.cast(length, tf.float32)
        settings = self.settings

        def count(rate: float) -> tf.Tensor:
            return tf.cast(tf.floor(real * rate), tf.int32)

        def crop() -> Tuple[tf.Tensor, tf.Tensor]:
            kept = count(settings.crop_rate)
            begin = tf.random.uniform([], 0, tf.maximum(length - kept, 1), dtype=tf.int32)
            return tf.concat([sequence[begin:begin + kept], tf.zeros([size - kept, self.width])], 0), kept

        def mask() -> Tuple[tf.Tensor, tf.Tensor]:
            chosen = tf.random.shuffle(tf.sequence_mask(count(settings.mask_rate), length))
            chosen = tf.concat([chosen, tf.zeros([size - length], tf.bool)], 0)
            return tf.where(chosen[:, None], tf.tile(self.mask, [size, 1]), sequence), length

        def reorder() -> Tuple[tf.Tensor, tf.Tensor]:
            moved = count(settings.reorder_rate)
            begin = tf.random.uniform([], 0, tf.maximum(length - moved, 1), dtype=tf.int32)
            order = tf.concat([tf.range(begin), tf.random.shuffle(tf.range(begin, begin + moved)),
                               tf.range(begin + moved, size)], 0)
            return tf.gather(sequence, order), length

        ways = ([crop] if settings.crop_rate < 1.0 else []) + ([mask] if settings.mask_rate > 0 else []) + \
            ([reorder] if settings.reorder_rate > 0 else [])
        if not ways:
            return sequence, length
        if len(ways) == 1:
            return ways[0]()
        return tf.switch_case(tf.random.uniform([], 0, len(ways), dtype=tf.int32), ways)


class AuxiliaryLoss(tf.keras.layers.Layer):
    """``call([x1, x2], training)``: in training adds ``loss_weight`` times the loss of the two views [B, d] to
    the model's loss and returns it (0 outside training). ``nce_loss``: CL4SRec's NT-Xent over the 2B views
    (each view's positive is the other view of its sample, its negatives every other view; similarities are
    dot products / ``temperature``); ``info_nce``: x1's softmax over x2's samples; ``l2_loss``: the mean squared
    distance. A batch of no samples gives 0."""

    def __init__(self, loss_type: str, loss_weight: float = 1.0, temperature: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type {loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
        self.loss_type, self.loss_weight, self.temperature = loss_type, loss_weight, temperature

    def call(self, views: Sequence[tf.Tensor], training: Any = False) -> tf.Tensor:  # pylint: disable=arguments-differ
        if not training:
            return tf.constant(0.0)
        x1, x2 = views[0], views[1]
        batch = tf.shape(x1)[0]
        if self.loss_type == "l2_loss":
            loss = _mean(tf.reduce_sum(tf.square(x1 - x2), axis=-1))
        elif self.loss_type == "info_nce":
            logits = tf.matmul(x1, x2, transpose_b=True) / self.temperature
            loss = _mean(-tf.linalg.diag_part(tf.nn.log_softmax(logits, axis=-1)))
        else:
            both = tf.concat([x1, x2], axis=0)
            similarity = tf.matmul(both, both, transpose_b=True) / self.temperature  # [2B, 2B]
            count = 2 * batch
            itself = tf.eye(count, dtype=tf.bool)
            positive = tf.roll(tf.eye(count), shift=batch, axis=1) > 0  # i's other view: (i + B) mod 2B
            logits = tf.where(itself, tf.fill(tf.shape(similarity), -1e9), similarity)
            loss = _mean(-tf.boolean_mask(tf.nn.log_softmax(logits, axis=-1), positive))
        loss = self.loss_weight * loss
        self.add_loss(loss)
        return loss


def _mean(values: tf.Tensor) -> tf.Tensor:
    """The mean of ``values``, 0 for none (the trainer's first step, on an empty batch, builds the variables)."""
    return tf.reduce_sum(values) / tf.maximum(tf.cast(tf.size(values), tf.float32), 1.0)


def auxiliary_loss_of(params: "struct_pb2.Struct") -> AuxiliaryLoss:
    """An AuxiliaryLoss of EasyRec's ``st_params`` (a google.protobuf.Struct)."""
    fields = params.fields
    return AuxiliaryLoss(fields["loss_type"].string_value if "loss_type" in fields else "",
                         fields["loss_weight"].number_value if "loss_weight" in fields else 1.0,
                         fields["temperature"].number_value if "temperature" in fields else 0.1)
