"""ONNX models: the protobuf wire format (wire), TensorProto (tensors), the graph's interface
(graph) and the reader."""
