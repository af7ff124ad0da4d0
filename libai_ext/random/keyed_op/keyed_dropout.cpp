// libai_ext_keyed_dropout: a "layout_invariant" dropout in one pass, y = x * scale where kept, x * 0 elsewhere,
// each element's keep decision hashed from its global position (counter_hash.h, the bits of counter_spec.py).
//
// Built with the OneFlow wheel's headers only (build.py): REGISTER_USER_OP and REGISTER_USER_KERNEL, no C++
// gradient function and no C++ Python entry.  Python (__init__.py) builds the op with OneFlow's OpBuilder,
// dispatches it through flow._C.dispatch_distributed_partial_fc_sample (two tensors and one int64 attribute,
// "num_sample", which carries the keep level) and differentiates it with a flow.autograd.Function that applies
// the same op to dy.
//
//   inputs  x (float32 or float64; on CUDA also float16 and bfloat16), keys (int32, shape (6,): C, a, d1, d2, d3 as signed int32, then the
//           micro-batch m whose rows are numbered after m * dim 0 rows of the step)
//   output  y, laid out like x (split on any axis, broadcast or partial sum)
//   attrs   num_sample (int64): the keep level (counter_spec.keep_level); scale (float): fixed per op expression
//
// Each rank finds its own slice of the logical x from its rank in the placement's hierarchy and x's nd-sbp
// (a balanced split per hierarchy axis, as global_index.shard_box does), so no rank exchanges anything.
#include "oneflow/core/framework/framework.h"
#include "oneflow/core/common/balanced_splitter.h"
#ifdef __CUDACC__
#include "oneflow/core/ep/cuda/cuda_stream.h"
#endif
#include "glog_symbols.h"  // shims/: each library (CPU, CUDA) defines the glog symbols its CHECKs use

#include "counter_hash.h"

namespace oneflow {

namespace {

constexpr const char* kOp = "libai_ext_keyed_dropout";
constexpr int kMaxDims = 8;
constexpr int kKeyWords = 6;

// This rank's box of x read as a matrix (leading dims..., columns); a 0-d or 1-d x is an (n, 1) matrix.
struct MaskSlice {
  int ndim;
  int64_t local[kMaxDims];  // the box's extent per dim
  int64_t begin[kMaxDims];  // its first global position per dim
  int64_t rows[kMaxDims];   // global rows per step of a leading dim
  int64_t dim0;             // logical rows of dim 0 (a micro-batch's rows start at micro * dim0 * rows[0])
  int64_t columns;
  int64_t elements;
};

class MaskSliceCache final : public user_op::OpKernelCache {
 public:
  explicit MaskSliceCache(const MaskSlice& slice) : slice_(slice) {}
  const MaskSlice& slice() const { return slice_; }

 private:
  MaskSlice slice_;
};

void LocalRanges(const Shape& hierarchy, const NdSbp& nd_sbp, const Shape& logical, int64_t parallel_id,
                 std::vector<int64_t>* begin, std::vector<int64_t>* size) {
  const int64_t axes = logical.NumAxes();
  begin->assign(axes, 0);
  size->assign(logical.dim_vec().begin(), logical.dim_vec().end());
  std::vector<int64_t> coordinate(hierarchy.NumAxes());
  int64_t rest = parallel_id;  // ranks numbered row-major over the hierarchy
  for (int64_t h = hierarchy.NumAxes() - 1; h >= 0; --h) {
    coordinate[h] = rest % hierarchy.At(h);
    rest /= hierarchy.At(h);
  }
  for (int64_t h = 0; h < hierarchy.NumAxes(); ++h) {
    const SbpParallel& sbp = nd_sbp.sbp_parallel(h);
    if (!sbp.has_split_parallel()) { continue; }
    const int64_t axis = sbp.split_parallel().axis();
    const Range part = BalancedSplitter((*size)[axis], hierarchy.At(h)).At(coordinate[h]);
    (*begin)[axis] += part.begin();
    (*size)[axis] = part.size();
  }
}

std::shared_ptr<user_op::OpKernelCache> NewMaskSliceCache(user_op::KernelCacheContext* ctx) {
  const bool sliced = ctx->parallel_ctx().parallel_num() > 1;
  const Shape& logical = (sliced ? ctx->LogicalTensorDesc4ArgNameAndIndex("x", 0)
                                 : ctx->TensorDesc4ArgNameAndIndex("x", 0))->shape();
  const int64_t axes = logical.NumAxes();
  std::vector<int64_t> begin(axes, 0), local(logical.dim_vec().begin(), logical.dim_vec().end());
  if (sliced) {
    LocalRanges(*ctx->parallel_desc().hierarchy(), ctx->NdSbp4ArgNameAndIndex("x", 0), logical,
                ctx->parallel_ctx().parallel_id(), &begin, &local);
  }
  MaskSlice slice{};
  if (axes < 2) {
    slice.ndim = 2;
    slice.local[0] = axes == 0 ? 1 : local[0];
    slice.begin[0] = axes == 0 ? 0 : begin[0];
    slice.local[1] = 1;
    slice.rows[0] = 1;
    slice.dim0 = axes == 0 ? 1 : logical.At(0);  // logical rows (a 0-d x is one)
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
    slice.dim0 = logical.At(0);
    slice.columns = logical.At(axes - 1);
  }
  slice.elements = 1;
  for (int d = 0; d < slice.ndim; ++d) { slice.elements *= slice.local[d]; }
  return std::make_shared<MaskSliceCache>(slice);
}

// The global row of the local position's row, micro-batch offset included.
COUNTER_HASH_FN int64_t GlobalRow(const MaskSlice& slice, int64_t position, int64_t first_row) {
  const int last = slice.ndim - 1;
  int64_t rest = position / slice.local[last], row = first_row;
  for (int d = last - 1; d >= 0; --d) {
    row += (slice.begin[d] + rest % slice.local[d]) * slice.rows[d];
    rest /= slice.local[d];
  }
  return row;
}

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
    MaskApplier<device, T>::Apply(ctx->stream(), slice, ctx->Tensor4ArgNameAndIndex("keys", 0)->dptr<int32_t>(),
                                  static_cast<int>(ctx->Attr<int64_t>("num_sample")),
                                  static_cast<T>(ctx->Attr<float>("scale")),
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

// The keys live in device memory: each thread reads them (6 words, cached) rather than a host copy being made.
template<typename T>
__global__ void KeyedDropoutGpu(MaskSlice slice, const int32_t* device_keys, int level, T scale, const T* x,
                                T* y) {
  uint32_t keys[5];
  for (int i = 0; i < 5; ++i) { keys[i] = static_cast<uint32_t>(device_keys[i]); }
  const int64_t first_row = static_cast<int64_t>(device_keys[5]) * slice.dim0 * slice.rows[0];
  const int last = slice.ndim - 1;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < slice.elements;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t column = slice.begin[last] + i % slice.local[last];
    const bool keep = counter_keep(GlobalRow(slice, i, first_row), column, slice.columns, keys, level);
    y[i] = x[i] * (keep ? scale : static_cast<T>(0));
  }
}

template<typename T>
struct MaskApplier<DeviceType::kCUDA, T> {
  static void Apply(ep::Stream* stream, const MaskSlice& slice, const int32_t* keys, int level, T scale,
                    const T* x, T* y) {
    const int64_t blocks = std::min<int64_t>((slice.elements + 255) / 256, 8192);
    KeyedDropoutGpu<T><<<blocks, 256, 0, stream->As<ep::CudaStream>()->cuda_stream()>>>(slice, keys, level,
                                                                                         scale, x, y);
  }
};

REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCUDA, float)
REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCUDA, double)
// The scale rounded to the dtype, then one product rounded to it: OneFlow's CUDA dropout and the int32-op
// path's x * (keep * scale) alike.
REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCUDA, half)
REGISTER_KEYED_DROPOUT_KERNEL(DeviceType::kCUDA, nv_bfloat16)

#else  // the op itself and the CPU kernel: the host compiler's part

Maybe<void> InferTensorDesc(user_op::InferContext* ctx) {
  CHECK_LE_OR_RETURN(ctx->InputShape("x", 0).NumAxes(), kMaxDims) << kOp << ": at most " << kMaxDims << " dims";
  const Shape& keys = ctx->InputShape("keys", 0);
  CHECK_OR_RETURN(keys.NumAxes() == 1 && keys.At(0) == kKeyWords) << kOp << ": keys must have shape (6,)";
  ctx->SetOutputShape("y", 0, ctx->InputShape("x", 0));
  ctx->SetOutputIsDynamic("y", 0, ctx->InputIsDynamic("x", 0));
  return Maybe<void>::Ok();
}

Maybe<void> InferDataType(user_op::InferContext* ctx) {
  CHECK_OR_RETURN(ctx->InputDType("keys", 0) == DataType::kInt32) << kOp << ": keys must be int32";
  ctx->SetOutputDType("y", 0, ctx->InputDType("x", 0));
  return Maybe<void>::Ok();
}

// Element-wise and linear in x; every rank reads the keys whole.
Maybe<void> GetSbp(user_op::SbpContext* ctx) {
  const user_op::TensorDesc& x = ctx->LogicalTensorDesc4InputArgNameAndIndex("x", 0);
  for (int64_t axis = 0; axis < x.shape().NumAxes(); ++axis) {
    ctx->NewBuilder()
        .Split(user_op::OpArg("x", 0), axis)
        .Broadcast(user_op::OpArg("keys", 0))
        .Split(user_op::OpArg("y", 0), axis)
        .Build();
  }
  ctx->NewBuilder()
      .PartialSum(user_op::OpArg("x", 0))
      .Broadcast(user_op::OpArg("keys", 0))
      .PartialSum(user_op::OpArg("y", 0))
      .Build();
  return Maybe<void>::Ok();
}

Maybe<void> CheckAttrs(const user_op::UserOpDefWrapper&, const user_op::UserOpConfWrapper& conf) {
  const int64_t level = conf.attr<int64_t>("num_sample");
  CHECK_OR_RETURN(level >= 0 && level <= 65536) << kOp << ": num_sample carries the keep level, in [0, 65536]";
  return Maybe<void>::Ok();
}

REGISTER_USER_OP(kOp)
    .Input("x")
    .Input("keys")
    .Output("y")
    .Attr<int64_t>("num_sample", 0)
    .Attr<float>("scale", 1.0f)
    .SetCheckAttrFn(CheckAttrs)
    .SetTensorDescInferFn(InferTensorDesc)
    .SetDataTypeInferFn(InferDataType)
    .SetGetSbpFn(GetSbp);

template<typename T>
struct MaskApplier<DeviceType::kCPU, T> {
  static void Apply(ep::Stream*, const MaskSlice& slice, const int32_t* key_data, int level, T scale, const T* x,
                    T* y) {
    uint32_t keys[5];
    for (int i = 0; i < 5; ++i) { keys[i] = static_cast<uint32_t>(key_data[i]); }
    const int64_t first_row = static_cast<int64_t>(key_data[5]) * slice.dim0 * slice.rows[0];
    const int last = slice.ndim - 1;
    const int64_t width = slice.local[last];
    const int64_t words = (slice.columns + 1) / 2;
    const bool whole_rows = width == slice.columns;
    for (int64_t position = 0; position < slice.elements; position += width) {
      const int64_t row = GlobalRow(slice, position, first_row);
      const T* in = x + position;
      T* out = y + position;
      if (whole_rows) {  // one hash per word: its high half keeps column k, its low half column k + words
        for (int64_t k = 0; k < words; ++k) {
          const uint32_t word = counter_mask_permute(static_cast<uint64_t>(row * words + k), keys);
          out[k] = in[k] * (counter_keep_half(word, 0, level) ? scale : static_cast<T>(0));
          if (k + words < width) {
            out[k + words] = in[k + words] * (counter_keep_half(word, 1, level) ? scale : static_cast<T>(0));
          }
        }
      } else {
        for (int64_t i = 0; i < width; ++i) {
          const bool keep = counter_keep(row, slice.begin[last] + i, slice.columns, keys, level);
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

}  // namespace oneflow
