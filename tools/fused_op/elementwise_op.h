// Inference functions of a user op y = f(x) that keeps x's shape and dtype, computes each element of y from
// the same element of x, and is linear in x: any split, broadcast, and partial sum pass through.
// Include after oneflow/core/framework/framework.h.
#pragma once

namespace oneflow {
namespace libai_ext {

inline Maybe<void> InferSameTensorDesc(user_op::InferContext* ctx) {
  ctx->SetOutputShape("y", 0, ctx->InputShape("x", 0));
  ctx->SetOutputIsDynamic("y", 0, ctx->InputIsDynamic("x", 0));
  return Maybe<void>::Ok();
}

inline Maybe<void> InferSameDataType(user_op::InferContext* ctx) {
  ctx->SetOutputDType("y", 0, ctx->InputDType("x", 0));
  return Maybe<void>::Ok();
}

inline Maybe<void> GetLinearElementwiseSbp(user_op::SbpContext* ctx) {
  const user_op::TensorDesc& x = ctx->LogicalTensorDesc4InputArgNameAndIndex("x", 0);
  for (int64_t axis = 0; axis < x.shape().NumAxes(); ++axis) {
    ctx->NewBuilder().Split(user_op::OpArg("x", 0), axis).Split(user_op::OpArg("y", 0), axis).Build();
  }
  ctx->NewBuilder().PartialSum(user_op::OpArg("x", 0)).PartialSum(user_op::OpArg("y", 0)).Build();
  return Maybe<void>::Ok();
}

}  // namespace libai_ext
}  // namespace oneflow
