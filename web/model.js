// The open checkpoint as the page holds it: the worker's model payload (tensorloupe.web.handlers
// model_payload: `inspect --json`'s fields, plus bytes_by_dtype and moe) with its tensor table
// turned back into records. This is the one place that knows the table's encoding.

// payload.tensors is the compact table of tensorloupe/web/page_table.py: {count, names (one
// newline-joined string, or a list), kind_columns, kinds: [[dtype, shape, ...], ...], kind,
// offset, file: one entry per tensor}. Each record gets the keys of `tensorloupe inspect --json`'s
// tensors: {name, dtype, shape, numel, nbytes, offset (null until known), strides, problem, file};
// "file" comes as a position in payload.files. Records of one kind share its values (the shape
// array too: nothing on the page changes a record). The MoE structure and the architecture
// block are not in it: they come next (withDetails), until then `details` is false.
export function decodeModel(payload) {
  const table = payload.tensors;
  const names = typeof table.names === "string" ? (table.count ? table.names.split("\n") : []) : table.names;
  const kinds = table.kinds.map((values) => Object.fromEntries(table.kind_columns.map((key, i) => [key, values[i]])));
  const {kind, offset, file} = table;
  const files = payload.files;
  const tensors = new Array(table.count);
  for (let i = 0; i < tensors.length; i++) {
    const k = kinds[kind[i]];
    tensors[i] = {name: names[i], dtype: k.dtype, shape: k.shape, numel: k.numel, nbytes: k.nbytes,
                  offset: offset[i], strides: k.strides, problem: k.problem, file: files[file[i]] ?? null};
  }
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
