// A trivial OneFlow 0.9.0 user op built outside OneFlow: y = x * 2.  Built twice and exercised by
// tools/repro/user_op_library.py (read its docstring for the build commands).
//
// Always: the op (shape, dtype and sbp inference) and its CPU kernel, which compile against the wheel's own
// headers.  The op declares a string attribute "name" for one reason: Python can dispatch a user op only
// through one of flow._C's dispatch_* functors, and dispatch_ofrecord_bytes_decoder(op, x, name) is one that
// takes a tensor and sets nothing but that attribute.
//
// With LIBAI_EXT_WITH_OP_EXPR: the gradient function (0.9.0's autograd engine runs the same
// OpExprGradFunction eagerly and, inside nn.Graph, to emit the backward ops) and a Python entry point
// `scale(x)`.  Their headers (op_expr.h and what it includes) are not in the wheel: the script takes them
// from OneFlow's v0.9.0 sources.
#ifdef LIBAI_EXT_WITH_OP_EXPR
#include <Python.h>
#endif

#include "oneflow/core/framework/framework.h"
#include "elementwise_op.h"  // tools/fused_op
#include "glog_symbols.h"  // tools/fused_op/shims

#ifdef LIBAI_EXT_WITH_OP_EXPR
#include "oneflow/core/framework/op_builder.h"
#include "oneflow/core/framework/op_expr.h"
#include "oneflow/core/framework/op_expr_grad_function.h"
#include "oneflow/core/framework/op_interpreter/op_interpreter_util.h"
#include "oneflow/core/framework/tensor.h"
#include "oneflow/core/framework/tensor_tuple.h"
#include "py_tensor.h"  // tools/fused_op/shims
#endif

#ifndef LIBAI_EXT_SCALE_OP
#define LIBAI_EXT_SCALE_OP "libai_ext_scale"
#endif

namespace oneflow {

namespace {

constexpr const char* kOp = LIBAI_EXT_SCALE_OP;

REGISTER_USER_OP(kOp)
    .Input("x")
    .Output("y")
    .Attr<std::string>("name", "")
    .SetTensorDescInferFn(libai_ext::InferSameTensorDesc)
    .SetDataTypeInferFn(libai_ext::InferSameDataType)
    .SetGetSbpFn(libai_ext::GetLinearElementwiseSbp);

template<typename T>
class ScaleCpuKernel final : public user_op::OpKernel {
 private:
  void Compute(user_op::KernelComputeContext* ctx) const override {
    const user_op::Tensor* x = ctx->Tensor4ArgNameAndIndex("x", 0);
    user_op::Tensor* y = ctx->Tensor4ArgNameAndIndex("y", 0);
    const T* in = x->dptr<T>();
    T* out = y->mut_dptr<T>();
    const int64_t n = x->shape_view().elem_cnt();
    for (int64_t i = 0; i < n; ++i) { out[i] = in[i] * static_cast<T>(2); }
  }
  bool AlwaysComputeWhenAllOutputsEmpty() const override { return false; }
};

#define REGISTER_SCALE_CPU_KERNEL(dtype)                                                \
  REGISTER_USER_KERNEL(kOp).SetCreateFn<ScaleCpuKernel<dtype>>().SetIsMatchedHob(      \
      (user_op::HobDeviceType() == DeviceType::kCPU)                                    \
      && (user_op::HobDataType("y", 0) == GetDataType<dtype>::value));

REGISTER_SCALE_CPU_KERNEL(float)
REGISTER_SCALE_CPU_KERNEL(double)

}  // namespace

#ifdef LIBAI_EXT_WITH_OP_EXPR

namespace one {

namespace {

Maybe<Tensor> Scale(const std::shared_ptr<Tensor>& x) {
  static const auto op = CHECK_JUST(OpBuilder(kOp).Input("x").Output("y").Build());
  return OpInterpUtil::Dispatch<Tensor>(*op, {x});
}

struct ScaleCaptureState : public AutoGradCaptureState {
  bool requires_grad = false;
};

// The op applied to dy is its own gradient; the keyed-mask op has the same property (its mask is a
// function of each element's position and the key, so the backward recomputes it instead of saving it).
class ScaleGrad : public OpExprGradFunction<ScaleCaptureState> {
 public:
  Maybe<void> Init(const OpExpr&) override { return Maybe<void>::Ok(); }
  Maybe<void> Capture(ScaleCaptureState* state, const TensorTuple& inputs, const TensorTuple&,
                      const AttrMap&) const override {
    state->requires_grad = inputs.at(0)->requires_grad();
    return Maybe<void>::Ok();
  }
  Maybe<void> Apply(const ScaleCaptureState* state, const TensorTuple& out_grads,
                    TensorTuple* in_grads) const override {
    in_grads->resize(1);
    if (state->requires_grad) { in_grads->at(0) = JUST(Scale(out_grads.at(0))); }
    return Maybe<void>::Ok();
  }
};

PyObject* PyScale(PyObject*, PyObject* arg) {
  if (!PyObject_TypeCheck(arg, PyTensorObject_Type)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a oneflow.Tensor, got %s", kOp, Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  const auto result = Scale(reinterpret_cast<PyTensorObject*>(arg)->data);
  if (!result.IsOk()) {
    PyErr_SetString(PyExc_RuntimeError, result.GetSerializedError().c_str());
    return nullptr;
  }
  return PyTensor_New(CHECK_JUST(result));
}

PyMethodDef kMethods[] = {{"scale", PyScale, METH_O, "y = x * 2 through the user op"},
                          {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "libai_ext_user_op", nullptr, -1, kMethods};

}  // namespace

REGISTER_OP_EXPR_GRAD_FUNCTION(kOp, ScaleGrad);

}  // namespace one

}  // namespace oneflow

PyMODINIT_FUNC PyInit_libai_ext_user_op() { return PyModule_Create(&oneflow::one::kModule); }

#else

}  // namespace oneflow

#endif  // LIBAI_EXT_WITH_OP_EXPR
