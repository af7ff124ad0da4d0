// Sketch of issue 43's fused op: libai_ext_keyed_dropout, dropout whose keep decision is counter_spec's
// keyed hash of each element's global position (tools/fused_op/counter_hash.h), applied in the same pass.
//
//   y = x * scale where kept, x * 0 where dropped (libai_ext.random.layers.stochastic.apply_keep)
//   dx = the same op on dy with the same attributes: the mask is recomputed, never stored.
//
// Attributes: keys (the 5 words C, a, d1, d2, d3), level (counter_spec.keep_level), scale.  The mask has
// x's shape, read as a matrix whose rows are its last dimension (counter_spec.mask_columns); a kernel finds
// its elements' global positions from x's logical shape and this rank's slice of it (its nd-sbp), so the
// mask of a global tensor is the same on every layout and no rank communicates.  Not covered yet: masks of
// another shape than x (DropPath's per-sample mask) and the micro-batch row numbering (`rows`).
//
// One file, two translation units linked into one library: g++ compiles the op, its CPU kernel, the gradient
// function and the Python entry `keyed_dropout(x, keys, level, scale)`; nvcc compiles the CUDA kernel
// (__CUDACC__).  Both share the slice geometry and counter_hash.h (tools/fused_op/check_keyed_dropout.py).
#include "oneflow/core/framework/framework.h"
#include "oneflow/core/job/nd_sbp_util.h"
#include "elementwise_op.h"  // tools/fused_op
#ifdef __CUDACC__
#include "oneflow/core/ep/cuda/cuda_stream.h"
#else
#include <Python.h>

#include "glog_symbols.h"  // tools/fused_op/shims
#include "oneflow/core/framework/mutable_attr_map.h"
#include "oneflow/core/framework/op_builder.h"
#include "oneflow/core/framework/op_expr.h"
#include "oneflow/core/framework/op_expr_grad_function.h"
#include "oneflow/core/framework/op_interpreter/op_interpreter_util.h"
#include "oneflow/core/framework/tensor.h"
#include "oneflow/core/framework/tensor_tuple.h"
#include "py_tensor.h"  // tools/fused_op/shims
#endif

#include "counter_hash.h"  // tools/fused_op

namespace oneflow {

namespace {

constexpr const char* kOp = "libai_ext_keyed_dropout";
constexpr int kMaxDims = 8;

// Where this rank's slice of x lies in the mask's matrix: everything a kernel needs besides the keys.
struct MaskSlice {
  int ndim;                  // of the matrix: 2, with a 0-d or 1-d x read as (n, 1)
  int64_t local[kMaxDims];   // this slice's sizes, leading dimensions then columns
  int64_t begin[kMaxDims];   // its first global index per dimension
  int64_t rows[kMaxDims];    // global row stride per leading dimension (0 for the columns)
  int64_t columns;           // global columns per row
  int64_t elements;
};

class MaskSliceCache final : public user_op::OpKernelCache {
 public:
  explicit MaskSliceCache(const MaskSlice& slice) : slice_(slice) {}
  const MaskSlice& slice() const { return slice_; }

 private:
  MaskSlice slice_;
};

std::shared_ptr<user_op::OpKernelCache> NewMaskSliceCache(user_op::KernelCacheContext* ctx) {
  // A local tensor (or a placement of one rank) has no logical descriptor of its own: it is the whole.
  const bool sliced = ctx->parallel_ctx().parallel_num() > 1;
  const Shape& logical = (sliced ? ctx->LogicalTensorDesc4ArgNameAndIndex("x", 0)
                                 : ctx->TensorDesc4ArgNameAndIndex("x", 0))->shape();
  const int64_t axes = logical.NumAxes();
  std::vector<int64_t> begin(axes, 0), local(logical.dim_vec().begin(), logical.dim_vec().end());
  if (sliced) {
    const TensorSliceView view =
        GetTensorSliceView4ParallelId(*ctx->parallel_desc().hierarchy(), ctx->NdSbp4ArgNameAndIndex("x", 0),
                                      logical, ctx->parallel_ctx().parallel_id());
    for (int64_t d = 0; d < axes; ++d) {
      begin[d] = view.At(d).begin();
      local[d] = view.At(d).size();
    }
  }
  MaskSlice slice{};
  if (axes < 2) {  // counter_spec.mask_columns: (n, 1), a 0-d tensor as (1, 1)
    slice.ndim = 2;
    slice.local[0] = axes == 0 ? 1 : local[0];
    slice.begin[0] = axes == 0 ? 0 : begin[0];
    slice.local[1] = 1;
    slice.rows[0] = 1;
    slice.columns = 1;
  } else {
    slice.ndim = static_cast<int>(axes);
    int64_t stride = 1;
    for (int64_t d = axes - 1; d >= 0; --d) {
      slice.local[d] = local[d];
      slice.begin[d] = begin[d];
      if (d < axes - 1) {
        slice.rows[d] = stride;
        stride *= logical.At(d);
      }
    }
    slice.columns = logical.At(axes - 1);
  }
  slice.elements = 1;
  for (int d = 0; d < slice.ndim; ++d) { slice.elements *= slice.local[d]; }
  return std::make_shared<MaskSliceCache>(slice);
}

struct MaskKeys {
  uint32_t words[5];
  int32_t level;
};

MaskKeys ReadKeys(user_op::KernelComputeContext* ctx) {
  MaskKeys keys{};
  const auto& words = ctx->Attr<std::vector<int64_t>>("keys");
  for (int i = 0; i < 5; ++i) { keys.words[i] = static_cast<uint32_t>(words[i]); }
  keys.level = ctx->Attr<int32_t>("level");
  return keys;
}

// How a device applies the mask to a slice; specialised in each translation unit.
template<DeviceType device, typename T>
struct MaskApplier;

template<DeviceType device, typename T>
class KeyedDropoutKernel final : public user_op::OpKernel {
 public:
  std::shared_ptr<user_op::OpKernelCache> InitOpKernelCache(user_op::KernelCacheContext* ctx) const override {
    return NewMaskSliceCache(ctx);
  }

 private:
  void Compute(user_op::KernelComputeContext* ctx, user_op::OpKernelState*,
               const user_op::OpKernelCache* cache) const override {
    const MaskSlice& slice = dynamic_cast<const MaskSliceCache*>(cache)->slice();
    if (slice.elements == 0) { return; }
    MaskApplier<device, T>::Apply(ctx->stream(), slice, ReadKeys(ctx), static_cast<T>(ctx->Attr<float>("scale")),
                                  ctx->Tensor4ArgNameAndIndex("x", 0)->dptr<T>(),
                                  ctx->Tensor4ArgNameAndIndex("y", 0)->mut_dptr<T>());
  }
  bool AlwaysComputeWhenAllOutputsEmpty() const override { return false; }
};

#define REGISTER_KEYED_DROPOUT_KERNEL(device, dtype)                                         \
  REGISTER_USER_KERNEL(kOp).SetCreateFn<KeyedDropoutKernel<device, dtype>>().SetIsMatchedHob( \
      (user_op::HobDeviceType() == device)                                                     \
      && (user_op::HobDataType("y", 0) == GetDataType<dtype>::value));

#ifdef __CUDACC__
// Element `position` (C order) of the slice: whether the mask keeps it (one thread's element).
OF_DEVICE_FUNC bool KeepAt(const MaskSlice& slice, const MaskKeys& keys, int64_t position) {
  const int last = slice.ndim - 1;
  const int64_t column = slice.begin[last] + position % slice.local[last];
  int64_t rest = position / slice.local[last];
  int64_t row = 0;
  for (int d = last - 1; d >= 0; --d) {
    row += (slice.begin[d] + rest % slice.local[d]) * slice.rows[d];
    rest /= slice.local[d];
  }
  return counter_keep(row, column, slice.columns, keys.words, keys.level);
}

template<typename T>
__global__ void KeyedDropoutGpu(MaskSlice slice, MaskKeys keys, T scale, const T* x, T* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < slice.elements;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] = x[i] * (KeepAt(slice, keys, i) ? scale : static_cast<T>(0));
  }
}

template<typename T>
struct MaskApplier<DeviceType::kCUDA, T> {
  static void Apply(ep::Stream* stream, const MaskSlice& slice, const MaskKeys& keys, T scale, const T* x, T* y) {
    const int64_t blocks = std::min<int64_t>((slice.elements + 255) / 256, 8192);
    KeyedDropoutGpu<T><<<blocks, 256, 0, stream->As<ep::CudaStream>()->cuda_stream()>>>(slice, keys, scale, x, y);
  }
};

REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCUDA, float)
REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCUDA, double)
#else  // the g++ translation unit: the op, its CPU kernel, gradient and Python entry

Maybe<void> InferTensorDesc(user_op::InferContext* ctx) {
  CHECK_LE_OR_RETURN(ctx->InputShape("x", 0).NumAxes(), kMaxDims) << kOp << ": at most " << kMaxDims << " dims";
  return libai_ext::InferSameTensorDesc(ctx);
}

Maybe<void> CheckAttrs(const user_op::UserOpDefWrapper&, const user_op::UserOpConfWrapper& conf) {
  const auto& keys = conf.attr<std::vector<int64_t>>("keys");
  CHECK_EQ_OR_RETURN(keys.size(), 5) << kOp << ": keys must be (C, a, d1, d2, d3)";
  for (int i : {0, 2, 3, 4}) { CHECK_OR_RETURN(keys[i] & 1) << kOp << ": keys[" << i << "] must be odd"; }
  return Maybe<void>::Ok();
}

REGISTER_USER_OP(kOp)
    .Input("x")
    .Output("y")
    .Attr<std::vector<int64_t>>("keys")
    .Attr<int32_t>("level")
    .Attr<float>("scale")
    .SetCheckAttrFn(CheckAttrs)
    .SetTensorDescInferFn(InferTensorDesc)
    .SetDataTypeInferFn(libai_ext::InferSameDataType)
    .SetGetSbpFn(libai_ext::GetLinearElementwiseSbp);

// Row by row: a row's global index once, and where the slice holds whole rows each word hashed once for the
// two elements that read it (as _counter_kernel.c's keep_mask does).
template<typename T>
struct MaskApplier<DeviceType::kCPU, T> {
  static void Apply(ep::Stream*, const MaskSlice& slice, const MaskKeys& keys, T scale, const T* x, T* y) {
    const int last = slice.ndim - 1;
    const int64_t width = slice.local[last];
    const int64_t words = (slice.columns + 1) / 2;
    const bool whole_rows = width == slice.columns;
    for (int64_t position = 0; position < slice.elements; position += width) {
      int64_t rest = position / width, row = 0;
      for (int d = last - 1; d >= 0; --d) {
        row += (slice.begin[d] + rest % slice.local[d]) * slice.rows[d];
        rest /= slice.local[d];
      }
      const T* in = x + position;
      T* out = y + position;
      if (whole_rows) {
        for (int64_t k = 0; k < words; ++k) {
          const uint32_t word = counter_mask_permute(static_cast<uint64_t>(row * words + k), keys.words);
          out[k] = in[k] * (counter_keep_half(word, 0, keys.level) ? scale : static_cast<T>(0));
          if (k + words < width) {
            out[k + words] = in[k + words] * (counter_keep_half(word, 1, keys.level) ? scale : static_cast<T>(0));
          }
        }
      } else {
        for (int64_t i = 0; i < width; ++i) {
          const bool keep = counter_keep(row, slice.begin[last] + i, slice.columns, keys.words, keys.level);
          out[i] = in[i] * (keep ? scale : static_cast<T>(0));
        }
      }
    }
  }
};

REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCPU, float)
REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCPU, double)

#endif  // __CUDACC__

}  // namespace

#ifndef __CUDACC__
namespace one {

namespace {

Maybe<Tensor> KeyedDropout(const std::shared_ptr<Tensor>& x, const std::vector<int64_t>& keys, int32_t level,
                           float scale) {
  static const auto op = CHECK_JUST(OpBuilder(kOp).Input("x").Output("y").Build());
  auto& attrs = THREAD_CACHED_MUTABLE_ATTR_MAP("keys", "level", "scale");
  attrs.SetAllAttrs(keys, level, scale);
  return OpInterpUtil::Dispatch<Tensor>(*op, {x}, attrs);
}

struct KeyedDropoutState : public AutoGradCaptureState {
  bool requires_grad = false;
  std::vector<int64_t> keys;
  int32_t level = 0;
  float scale = 0.0f;
};

class KeyedDropoutGrad : public OpExprGradFunction<KeyedDropoutState> {
 public:
  Maybe<void> Init(const OpExpr& op) override {
    const auto* user_op = dynamic_cast<const UserOpExpr*>(&op);
    CHECK_NOTNULL_OR_RETURN(user_op);
    base_attrs_ = MakeAttrMapFromUserOpConf(user_op->proto());
    return Maybe<void>::Ok();
  }
  Maybe<void> Capture(KeyedDropoutState* state, const TensorTuple& inputs, const TensorTuple&,
                      const AttrMap& attrs) const override {
    state->requires_grad = inputs.at(0)->requires_grad();
    if (!state->requires_grad) { return Maybe<void>::Ok(); }
    ComposedAttrMap composed(attrs, base_attrs_);
    state->keys = JUST(composed.GetAttr<std::vector<int64_t>>("keys"));
    state->level = JUST(composed.GetAttr<int32_t>("level"));
    state->scale = JUST(composed.GetAttr<float>("scale"));
    return Maybe<void>::Ok();
  }
  Maybe<void> Apply(const KeyedDropoutState* state, const TensorTuple& out_grads,
                    TensorTuple* in_grads) const override {
    in_grads->resize(1);
    if (state->requires_grad) {
      in_grads->at(0) = JUST(KeyedDropout(out_grads.at(0), state->keys, state->level, state->scale));
    }
    return Maybe<void>::Ok();
  }

 private:
  AttrMap base_attrs_;
};

PyObject* PyKeyedDropout(PyObject*, PyObject* args) {
  PyObject *x, *keys_obj;
  int level;
  float scale;
  if (!PyArg_ParseTuple(args, "OOif", &x, &keys_obj, &level, &scale)) { return nullptr; }
  if (!PyObject_TypeCheck(x, PyTensorObject_Type)) {
    PyErr_Format(PyExc_TypeError, "%s: x must be a oneflow.Tensor, got %s", kOp, Py_TYPE(x)->tp_name);
    return nullptr;
  }
  PyObject* seq = PySequence_Fast(keys_obj, "keys must be a sequence of 5 ints");
  if (!seq) { return nullptr; }
  std::vector<int64_t> keys;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    keys.push_back(static_cast<int64_t>(PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(seq, i))));
  }
  Py_DECREF(seq);
  if (PyErr_Occurred()) { return nullptr; }
  const auto result = KeyedDropout(reinterpret_cast<PyTensorObject*>(x)->data, keys, level, scale);
  if (!result.IsOk()) {
    PyErr_SetString(PyExc_RuntimeError, result.GetSerializedError().c_str());
    return nullptr;
  }
  return PyTensor_New(CHECK_JUST(result));
}

PyMethodDef kMethods[] = {
    {"keyed_dropout", PyKeyedDropout, METH_VARARGS,
     "keyed_dropout(x, keys, level, scale): x * scale where counter_spec keeps, x * 0 elsewhere"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "libai_ext_keyed_dropout", nullptr, -1, kMethods};

}  // namespace

REGISTER_OP_EXPR_GRAD_FUNCTION(kOp, KeyedDropoutGrad);

}  // namespace one
#endif  // !__CUDACC__

}  // namespace oneflow

#ifndef __CUDACC__
PyMODINIT_FUNC PyInit_libai_ext_keyed_dropout() { return PyModule_Create(&oneflow::one::kModule); }
#endif
