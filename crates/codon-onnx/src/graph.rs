//! A small builder of ONNX graphs over `onnx-protobuf`'s message types: nodes with one output,
//! initializers, and the model's inputs and outputs.
use onnx_protobuf as pb;
use pb::attribute_proto::AttributeType;
use pb::tensor_proto::DataType;

/// The floating dtype of a graph's weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
}

impl Float {
    fn data_type(self) -> DataType {
        match self {
            Float::F32 => DataType::FLOAT,
            Float::F16 => DataType::FLOAT16,
        }
    }

    /// Little-endian bytes of `values` in this dtype.
    fn bytes(self, values: &[f32]) -> Vec<u8> {
        match self {
            Float::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Float::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        }
    }

    /// ONNX's `TensorProto.DataType` number, for Cast's `to`.
    pub fn data_type_id(self) -> i64 {
        self.data_type() as i64
    }

    /// The most negative finite value of this dtype: the additive bias of a masked key.
    pub fn lowest(self) -> f32 {
        match self {
            Float::F32 => f32::MIN,
            Float::F16 => half::f16::MIN.to_f32(),
        }
    }
}

/// An attribute of a node.
pub enum Attr {
    /// An integer.
    Int(&'static str, i64),
    /// A list of integers.
    Ints(&'static str, Vec<i64>),
}

impl Attr {
    fn proto(self) -> pb::AttributeProto {
        let mut a = pb::AttributeProto::new();
        match self {
            Attr::Int(name, v) => {
                a.name = name.to_string();
                a.type_ = AttributeType::INT.into();
                a.i = v;
            }
            Attr::Ints(name, v) => {
                a.name = name.to_string();
                a.type_ = AttributeType::INTS.into();
                a.ints = v;
            }
        }
        a
    }
}

/// A graph under construction.
pub struct Graph {
    float: Float,
    nodes: Vec<pb::NodeProto>,
    initializers: Vec<pb::TensorProto>,
    inputs: Vec<pb::ValueInfoProto>,
    outputs: Vec<pb::ValueInfoProto>,
    counter: usize,
}

impl Graph {
    /// An empty graph whose floating tensors are `float`.
    pub fn new(float: Float) -> Self {
        Self { float, nodes: Vec::new(), initializers: Vec::new(), inputs: Vec::new(), outputs: Vec::new(), counter: 0 }
    }

    /// The floating dtype.
    pub fn float(&self) -> Float {
        self.float
    }

    /// A node `op` over `inputs`; returns the name of its one output.
    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: Vec<Attr>) -> String {
        let output = format!("{}_{}", op.to_lowercase(), self.counter + 1);
        self.node_named(op, inputs, attrs, &output);
        output
    }

    /// A node `op` over `inputs` whose one output is `output` (a graph output's name).
    pub fn node_named(&mut self, op: &str, inputs: &[&str], attrs: Vec<Attr>, output: &str) {
        self.counter += 1;
        let mut n = pb::NodeProto::new();
        n.name = format!("{op}_{}", self.counter);
        n.op_type = op.to_string();
        n.input = inputs.iter().map(|s| s.to_string()).collect();
        n.output = vec![output.to_string()];
        n.attribute = attrs.into_iter().map(Attr::proto).collect();
        self.nodes.push(n);
    }

    /// A floating initializer `name` of shape `dims` from f32 values (stored in the graph's dtype).
    pub fn weight(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        let data_type = self.float.data_type();
        let raw = self.float.bytes(values);
        self.push_initializer(name, dims, data_type, raw)
    }

    /// A floating scalar constant in the graph's dtype.
    pub fn scalar(&mut self, value: f32) -> String {
        self.counter += 1;
        let name = format!("const_{}", self.counter);
        self.weight(&name, &[], &[value])
    }

    /// An int64 constant of shape `dims`.
    pub fn ints(&mut self, dims: &[usize], values: &[i64]) -> String {
        self.counter += 1;
        let name = format!("ints_{}", self.counter);
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.push_initializer(&name, dims, DataType::INT64, raw)
    }

    fn push_initializer(&mut self, name: &str, dims: &[usize], data_type: DataType, raw: Vec<u8>) -> String {
        let mut t = pb::TensorProto::new();
        t.name = name.to_string();
        t.dims = dims.iter().map(|&d| d as i64).collect();
        t.data_type = data_type as i32;
        t.raw_data = raw;
        self.initializers.push(t);
        name.to_string()
    }

    /// A graph input of int64 (`dims` named, so any size).
    pub fn int64_input(&mut self, name: &str, dims: &[&str]) -> String {
        self.inputs.push(value_info(name, DataType::INT64, dims));
        name.to_string()
    }

    /// A graph output in the graph's floating dtype.
    pub fn float_output(&mut self, name: &str, dims: &[&str]) {
        self.outputs.push(value_info(name, self.float.data_type(), dims));
    }

    /// The model: the graph at `opset` of the default domain.
    pub fn into_model(self, opset: i64, doc: &str) -> pb::ModelProto {
        let mut g = pb::GraphProto::new();
        g.name = "codon_transformer".to_string();
        g.node = self.nodes;
        g.initializer = self.initializers;
        g.input = self.inputs;
        g.output = self.outputs;
        let mut m = pb::ModelProto::new();
        // IR version 8 goes with opset 13 to 17 (onnx/docs/Versioning.md).
        m.ir_version = 8;
        let mut set = pb::OperatorSetIdProto::new();
        set.domain = String::new();
        set.version = opset;
        m.opset_import = vec![set];
        m.producer_name = "codon-ascend".to_string();
        m.producer_version = env!("CARGO_PKG_VERSION").to_string();
        m.doc_string = doc.to_string();
        m.graph = protobuf::MessageField::some(g);
        m
    }
}

fn value_info(name: &str, data_type: DataType, dims: &[&str]) -> pb::ValueInfoProto {
    let mut shape = pb::TensorShapeProto::new();
    for d in dims {
        let mut dim = pb::tensor_shape_proto::Dimension::new();
        dim.set_dim_param(d.to_string());
        shape.dim.push(dim);
    }
    let mut tensor = pb::type_proto::Tensor::new();
    tensor.elem_type = data_type as i32;
    tensor.shape = protobuf::MessageField::some(shape);
    let mut ty = pb::TypeProto::new();
    ty.set_tensor_type(tensor);
    let mut v = pb::ValueInfoProto::new();
    v.name = name.to_string();
    v.type_ = protobuf::MessageField::some(ty);
    v
}
