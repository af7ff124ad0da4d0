// The layout of a Python oneflow.Tensor and its constructor, both exported by _oneflow_internal: 0.9.0's
// oneflow/api/python/framework/tensor.h, which declares them, is in neither the wheel nor OneFlow's core headers.
// Include after Python.h and oneflow/core/framework/tensor.h.
#pragma once

namespace oneflow {
namespace one {
typedef struct {
  PyObject_HEAD;
  std::shared_ptr<Tensor> data;
} PyTensorObject;
extern PyTypeObject* PyTensorObject_Type;
PyObject* PyTensor_New(const std::shared_ptr<Tensor>& data);
}  // namespace one
}  // namespace oneflow
