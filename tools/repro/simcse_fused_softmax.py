"""LiBai main's SimCSE config cannot run LiBai's fused attention softmax on OneFlow 0.9.0.

    python tools/repro/simcse_fused_softmax.py   # LiBai main (either line has the layer), one process, 10-20 s

SimCSE's config keeps LiBai's BERT default ``scale_mask_softmax_fusion=True`` and sets
``apply_query_key_layer_scaling=False``.  LiBai's ``MultiheadAttention`` then calls
``flow._C.fused_scale_mask_softmax_dropout(..., scale=self.coeff)`` with ``coeff = None``, and SimCSE's
``BertForSimCSE.forward`` hands it the attention mask its dataset makes (``flow.long``) without LiBai's cast.
OneFlow refuses both before it looks for a kernel, so on every device: a float argument given ``None``, and a
mask that is not bool.
"""
import oneflow as flow

from _common import layout, libai_version, message, verdict

from libai.layers import MultiheadAttention
from libai.models.bert_model import BertExtendedAttnMask

dist = layout()
placement = dist.get_layer_placement(0)
hidden = flow.randn(2, 8, 64).to_global(placement=placement, sbp=flow.sbp.broadcast)
# As SimCSE's TrainDataset_unsup makes it (flow.long), extended as BertForSimCSE.forward does
mask = BertExtendedAttnMask()(flow.ones(2, 8, dtype=flow.long).to_global(placement=placement, sbp=flow.sbp.broadcast))

errors = {}
for scaling in (False, True):  # SimCSE's setting, then with only the scale given
    attention = MultiheadAttention(64, 4, attention_dropout_prob=0.1, scale_mask_softmax_fusion=True,
                                   apply_query_key_layer_scaling=scaling, layer_idx=0).train()
    try:
        attention(hidden, attention_mask=mask)
        errors[scaling] = None
    except (TypeError, RuntimeError) as error:
        errors[scaling] = message(error)
    print(f"apply_query_key_layer_scaling={scaling}, mask {mask.dtype}: {errors[scaling] or 'ran'}", flush=True)
verdict("argument 'scale' must be float" in (errors[False] or "") and "kInt64" in (errors[True] or ""),
        f"libai {libai_version()}: SimCSE's attention settings are refused by OneFlow {flow.__version__} "
        "(scale=None, then the int64 mask)")
