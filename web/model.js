// The open checkpoint as the page holds it: the worker's model payload (tensorloupe.web.handlers
// model_payload: `inspect --json`'s fields, plus bytes_by_dtype and moe) with its tensor table
// turned back into records. This is the one place that knows the table's encoding.

// payload.tensors: {columns: ["name", "dtype", ...], rows: [[...], ...]}. Each record gets the
// column names as keys, the keys of `tensorloupe inspect --json`'s tensors: {name, dtype, shape,
// numel, nbytes, offset (null until known), strides, problem, file}; "file" comes as a position
// in payload.files. The MoE structure and the architecture block are not in it: they come next
// (withDetails), until then `details` is false.
export function decodeModel(payload) {
  const {columns, rows} = payload.tensors;
  const file = columns.indexOf("file");
  const tensors = rows.map((row) => {
    const record = Object.fromEntries(columns.map((key, i) => [key, row[i]]));
    record.file = payload.files[row[file]] ?? null;
    return record;
  });
  const byName = new Map(tensors.map((t) => [t.name, t]));
  return {...payload, moe: null, architecture: null, memory: null, details: false, tensors,
          tensor: (name) => byName.get(name) || null};
}

// The worker's model_details reply ({moe, architecture, memory}) added to the model.
export function withDetails(model, details) {
  return Object.assign(model, {moe: details.moe, architecture: details.architecture,
                               memory: details.memory, details: true});
}

// The tensor shown first: the first readable matrix, else the first tensor.
export function firstTensor(model) {
  return model.tensors.find((t) => t.shape.length >= 2 && !t.problem) || model.tensors[0] || null;
}
