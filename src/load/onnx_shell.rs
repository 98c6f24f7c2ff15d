//! The outer two levels of an ONNX model, with the large repeated messages left encoded.
//!
//! A graph of 100,000 nodes decoded at once as prost's `ModelProto` held ~1.8 KB of heap per node
//! beside the IR built from it (181 MiB of the 350 MiB peak on the benchmark's s100k model). Here the
//! model and its main graph are decoded with their `node`, `initializer` and `value_info` fields as
//! byte slices of the compact buffer (a protobuf message and a `bytes` field are the same on the
//! wire); each message is decoded when the IR takes it, and dropped.
//!
//! The structs are named `ModelProto` and `GraphProto` because prost's decoding errors name the
//! message: an error reads the same as when the whole model was decoded at once.

use std::cell::Cell;

use bytes::Bytes;
use prost::encoding::{encoded_len_varint, key_len};
use prost::Message;

use super::onnx_pb as pb;

#[derive(Clone, PartialEq, Message)]
pub(crate) struct ModelProto {
    #[prost(int64, optional, tag = "1")]
    pub ir_version: Option<i64>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<pb::OperatorSetIdProto>,
    #[prost(string, optional, tag = "2")]
    pub producer_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub producer_version: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub model_version: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
    /// Every occurrence of the field: protobuf merges a message field that appears twice.
    #[prost(bytes = "bytes", repeated, tag = "7")]
    pub graph: Vec<Bytes>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<pb::StringStringEntryProto>,
    #[prost(message, repeated, tag = "20")]
    pub training_info: Vec<pb::TrainingInfoProto>,
    #[prost(message, repeated, tag = "25")]
    pub functions: Vec<pb::FunctionProto>,
    #[prost(message, repeated, tag = "26")]
    pub configuration: Vec<pb::DeviceConfigurationProto>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct GraphProto {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub node: Vec<Bytes>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(bytes = "bytes", repeated, tag = "5")]
    pub initializer: Vec<Bytes>,
    #[prost(message, repeated, tag = "15")]
    pub sparse_initializer: Vec<pb::SparseTensorProto>,
    #[prost(string, optional, tag = "10")]
    pub doc_string: Option<String>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<pb::ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<pb::ValueInfoProto>,
    #[prost(bytes = "bytes", repeated, tag = "13")]
    pub value_info: Vec<Bytes>,
    #[prost(message, repeated, tag = "14")]
    pub quantization_annotation: Vec<pb::TensorAnnotation>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<pb::StringStringEntryProto>,
}

/// The bytes a length-delimited field of this tag and payload length takes.
fn field_len(tag: u32, len: usize) -> i64 {
    (key_len(tag) + encoded_len_varint(len as u64) + len) as i64
}

/// A decoding failure of one message of the main graph, with the fields that lead to it.
pub(crate) struct LazyError {
    pub error: prost::DecodeError,
    /// `GraphProto.node` and the like, innermost first.
    pub outer: [&'static str; 2],
}

/// A repeated message field: decoded already (a subgraph inside an attribute), or encoded (the main
/// graph), decoded one message at a time as it is read.
pub(crate) enum Lazy<'a, T> {
    Decoded(&'a [T]),
    Encoded {
        items: &'a [Bytes],
        tag: u32,
        field: &'static str,
        /// Re-encoded minus encoded length of the messages read so far: what prost dropped
        /// (unknown fields), in bytes, negative.
        shrink: &'a Cell<i64>,
    },
}

impl<'a, T: Message + Default + Clone> Lazy<'a, T> {
    pub fn len(&self) -> usize {
        match self {
            Lazy::Decoded(v) => v.len(),
            Lazy::Encoded { items, .. } => items.len(),
        }
    }

    /// Each message in turn, borrowed or freshly decoded.
    pub fn iter(&self) -> impl Iterator<Item = Result<std::borrow::Cow<'a, T>, LazyError>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Message `i` (less than [`Lazy::len`]), borrowed or freshly decoded.
    pub fn get(&self, i: usize) -> Result<std::borrow::Cow<'a, T>, LazyError> {
        use std::borrow::Cow;
        match self {
            Lazy::Decoded(v) => Ok(Cow::Borrowed(&v[i])),
            Lazy::Encoded {
                items,
                tag,
                field,
                shrink,
            } => {
                let raw = &items[i];
                let msg = T::decode(raw.clone()).map_err(|error| LazyError {
                    error,
                    outer: [field, "ModelProto.graph"],
                })?;
                let delta = field_len(*tag, msg.encoded_len()) - field_len(*tag, raw.len());
                shrink.set(shrink.get() + delta);
                Ok(Cow::Owned(msg))
            }
        }
    }

    /// Message `i` as it is encoded; `None` for a decoded field.
    pub fn raw(&self, i: usize) -> Option<&'a Bytes> {
        match self {
            Lazy::Decoded(_) => None,
            Lazy::Encoded { items, .. } => items.get(i),
        }
    }
}

/// A `NodeProto` of the main graph read in place: its names borrowed from the buffer, its
/// attributes and metadata decoded by prost. prost's `NodeProto` made a `String` of every input
/// name, only for the IR to look it up and drop it, and a `Vec` for each list: with the node's own
/// re-encoding (for the count of ignored bytes) a sixth of `mem`'s instructions on a graph of many
/// nodes.
pub(crate) struct NodeView<'a> {
    pub name: Option<&'a str>,
    pub op_type: Option<&'a str>,
    pub domain: Option<&'a str>,
    pub metadata_props: Vec<pb::StringStringEntryProto>,
}

/// An attribute of a [`NodeView`]: its name borrowed from the buffer where it was read in place
/// (a `String` per attribute was ~50,000 allocations on a graph of 100,000 nodes), or `None`
/// where prost decoded it (the name is then the message's own).
pub(crate) struct AttrView<'a> {
    pub name: Option<&'a str>,
    pub proto: pb::AttributeProto,
    /// The encoded attribute, where it was read in place (text and numbers only: what it decodes
    /// to depends on these bytes alone); `None` where prost decoded it.
    pub encoded: Option<&'a [u8]>,
}

/// The lists a [`NodeView`] reads, kept from node to node so that their buffers are reused.
#[derive(Default)]
pub(crate) struct NodeLists<'a> {
    pub inputs: Vec<&'a str>,
    pub outputs: Vec<&'a str>,
    pub attributes: Vec<AttrView<'a>>,
}

impl<'a> NodeView<'a> {
    /// Reads the encoded node `raw`, its input and output names and its attributes into `lists` (in
    /// order, cleared first). `None` wherever prost's reading could differ in any way: a field this
    /// reader does not take (unknown to the schema, or `device_configurations`), a wire type or a
    /// length that does not fit, a name given twice, a varint longer than it needs to be, text that
    /// is not UTF-8, an attribute or metadata entry that does not decode or that re-encodes to
    /// another length (prost drops unknown fields), an attribute that holds a graph or a type
    /// (their nesting counts towards prost's recursion limit). The caller decodes such a node with
    /// prost ([`Lazy::get`]), which gives its errors and its count of ignored bytes; a node read
    /// here re-encodes to its own length.
    pub fn read(raw: &'a Bytes, lists: &mut NodeLists<'a>) -> Option<NodeView<'a>> {
        let NodeLists {
            inputs,
            outputs,
            attributes,
        } = lists;
        inputs.clear();
        outputs.clear();
        attributes.clear();
        let mut view = NodeView {
            name: None,
            op_type: None,
            domain: None,
            metadata_props: Vec::new(),
        };
        let mut once = Once::default();
        let mut buf: &'a [u8] = raw;
        while !buf.is_empty() {
            let key = minimal_varint(&mut buf)?;
            // every field a node view takes is length-delimited
            if key & 7 != 2 {
                return None;
            }
            let field = key >> 3;
            let body = delimited(&mut buf)?;
            let len = body.len();
            match field {
                1 => inputs.push(text(body)?),
                2 => outputs.push(text(body)?),
                3 | 4 | 6 | 7 | 8 => {
                    once.first(field)?;
                    let text = text(body)?;
                    match field {
                        3 => view.name = Some(text),
                        4 => view.op_type = Some(text),
                        7 => view.domain = Some(text),
                        _ => {}
                    }
                }
                5 => {
                    if let Some((name, proto)) = attribute(raw, body) {
                        attributes.push(AttrView {
                            name,
                            proto,
                            encoded: Some(body),
                        });
                        continue;
                    }
                    let a = pb::AttributeProto::decode(raw.slice_ref(body)).ok()?;
                    let nests = a.g.is_some()
                        || !a.graphs.is_empty()
                        || a.tp.is_some()
                        || !a.type_protos.is_empty();
                    if nests || a.encoded_len() != len {
                        return None;
                    }
                    attributes.push(AttrView {
                        name: None,
                        proto: a,
                        encoded: None,
                    });
                }
                9 => {
                    let e = pb::StringStringEntryProto::decode(body).ok()?;
                    if e.encoded_len() != len {
                        return None;
                    }
                    view.metadata_props.push(e);
                }
                _ => return None,
            }
        }
        Some(view)
    }
}

/// An attribute (`body`, a slice of `raw`) read in place when it holds only text, numbers and
/// lists of them, each field as prost writes it: minimal varints, each singular field once, lists
/// unpacked (how prost writes this proto2 schema's); `None` for anything else (a tensor, a graph, a
/// type, an unknown field), which [`NodeView::read`] gives to prost. prost's generic decoding and
/// the re-encoded length that checked it were ~1,000 instructions per attribute.
fn attribute<'a>(raw: &'a Bytes, body: &'a [u8]) -> Option<(Option<&'a str>, pb::AttributeProto)> {
    let mut a = pb::AttributeProto::default();
    let mut name = None;
    let mut once = Once::default();
    let mut buf = body;
    let fixed32 = |buf: &mut &[u8]| {
        let (b, rest) = buf.split_first_chunk::<4>()?;
        *buf = rest;
        Some(f32::from_le_bytes(*b))
    };
    while !buf.is_empty() {
        let key = minimal_varint(&mut buf)?;
        match (key >> 3, key & 7) {
            (field @ (1 | 13 | 21), 2) => {
                once.first(field)?;
                let t = text(delimited(&mut buf)?)?;
                match field {
                    1 => name = Some(t),
                    13 => a.doc_string = Some(t.to_string()),
                    _ => a.ref_attr_name = Some(t.to_string()),
                }
            }
            (2, 5) => {
                once.first(2)?;
                a.f = Some(fixed32(&mut buf)?);
            }
            (3, 0) => {
                once.first(3)?;
                a.i = Some(minimal_varint(&mut buf)? as i64);
            }
            (4, 2) => {
                once.first(4)?;
                a.s = Some(raw.slice_ref(delimited(&mut buf)?));
            }
            (7, 5) => a.floats.push(fixed32(&mut buf)?),
            (8, 0) => a.ints.push(minimal_varint(&mut buf)? as i64),
            (9, 2) => a.strings.push(raw.slice_ref(delimited(&mut buf)?)),
            (20, 0) => {
                once.first(20)?;
                // an enum is an int32: prost keeps the low 32 bits and writes them sign-extended
                let v = minimal_varint(&mut buf)?;
                let t = v as i32;
                if t as u64 != v {
                    return None;
                }
                a.r#type = Some(t);
            }
            _ => return None,
        }
    }
    Some((name, a))
}

/// A `TensorProto` (an initializer of the main graph) read in place, when it holds only what
/// initializers usually hold: a name, dims, a data type, and its bytes inline (`raw_data`) or
/// elsewhere (`external_data`, `data_location`; the skim writes these for every payload it leaves
/// in the file). prost made six `String`s of the three external-data entries of each such tensor.
pub(crate) struct TensorView<'a> {
    pub name: &'a str,
    pub data_type: Option<i32>,
    pub dims: Vec<i64>,
    pub raw_data: Option<Bytes>,
    /// `(key, value)` of each `external_data` entry, an absent one as `""`.
    pub external_data: Vec<(&'a str, &'a str)>,
    pub data_location: Option<i32>,
}

impl<'a> TensorView<'a> {
    /// Reads the encoded tensor `raw`; `None` wherever prost's reading could differ (see
    /// [`NodeView::read`]) and for every field but the six above (typed values, segments, strings,
    /// documentation, metadata): prost decodes those.
    pub fn read(raw: &'a Bytes) -> Option<TensorView<'a>> {
        let mut view = TensorView {
            name: "",
            data_type: None,
            dims: Vec::new(),
            raw_data: None,
            external_data: Vec::new(),
            data_location: None,
        };
        let mut once = Once::default();
        let mut buf: &'a [u8] = raw;
        while !buf.is_empty() {
            let key = minimal_varint(&mut buf)?;
            match (key >> 3, key & 7) {
                (1, 0) => view.dims.push(minimal_varint(&mut buf)? as i64),
                (field @ (2 | 14), 0) => {
                    once.first(field)?;
                    // an int32 prost writes in at most five bytes (a negative one takes ten)
                    let v = i32::try_from(minimal_varint(&mut buf)?).ok()?;
                    if field == 2 {
                        view.data_type = Some(v);
                    } else {
                        view.data_location = Some(v);
                    }
                }
                (field @ (8 | 9 | 13), 2) => {
                    let body = delimited(&mut buf)?;
                    match field {
                        8 => {
                            once.first(8)?;
                            view.name = text(body)?;
                        }
                        9 => {
                            once.first(9)?;
                            view.raw_data = Some(raw.slice_ref(body));
                        }
                        _ => view.external_data.push(entry(body)?),
                    }
                }
                _ => return None,
            }
        }
        Some(view)
    }
}

/// The singular fields (numbers below 32) a reader has met: prost keeps the last of a field given
/// twice, and re-encodes it once, so a reader in place takes each once only.
#[derive(Default)]
struct Once(u32);

impl Once {
    /// `Some` the first time `field` comes, `None` after.
    fn first(&mut self, field: u64) -> Option<()> {
        let bit = 1u32.checked_shl(u32::try_from(field).ok()?)?;
        let first = self.0 & bit == 0;
        self.0 |= bit;
        first.then_some(())
    }
}

/// A `StringStringEntryProto` read in place: its key and value, each at most once.
fn entry(mut buf: &[u8]) -> Option<(&str, &str)> {
    let (mut key, mut value) = (None, None);
    while !buf.is_empty() {
        let tag = minimal_varint(&mut buf)?;
        let text = text(delimited(&mut buf)?)?;
        let slot = match tag {
            0x0a => &mut key,
            0x12 => &mut value,
            _ => return None,
        };
        if slot.replace(text).is_some() {
            return None;
        }
    }
    Some((key.unwrap_or(""), value.unwrap_or("")))
}

/// `bytes` as text, when they are UTF-8 (as prost checks a `string` field). Names are nearly always
/// ASCII, checked a word at a time: `from_utf8` took ~120 instructions per name of ~25 bytes, 3% of
/// `mem` on a graph of 10,000 nodes.
#[inline]
fn text(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

/// The payload of a length-delimited field at `buf` (after its key), and `buf` moved past it.
fn delimited<'b>(buf: &mut &'b [u8]) -> Option<&'b [u8]> {
    let len = usize::try_from(minimal_varint(buf)?).ok()?;
    let body = buf.get(..len)?;
    *buf = &buf[len..];
    Some(body)
}

/// A varint that takes as few bytes as its value needs (prost writes every varint so).
#[inline(always)]
pub(super) fn minimal_varint(buf: &mut &[u8]) -> Option<u64> {
    // one byte (tags, lengths of names, small dims: nearly every varint of a graph) is minimal
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            *buf = rest;
            return Some(u64::from(b));
        }
    }
    long_minimal_varint(buf)
}

/// [`minimal_varint`] of more than one byte (or of none).
#[inline(never)]
fn long_minimal_varint(buf: &mut &[u8]) -> Option<u64> {
    let before = buf.len();
    let v = prost::encoding::decode_varint(buf).ok()?;
    (before - buf.len() == encoded_len_varint(v)).then_some(v)
}

/// Adds to `counts` the `node`, `initializer` and `value_info` fields of the encoded graph `buf`
/// (up to where it stops making sense: prost reports what is wrong with it).
fn count_lists(mut buf: &[u8], counts: &mut [usize; 3]) {
    use prost::encoding::{decode_key, skip_field, DecodeContext, WireType};
    while !buf.is_empty() {
        let Ok((tag, wire)) = decode_key(&mut buf) else {
            return;
        };
        if skip_field(wire, tag, &mut buf, DecodeContext::default()).is_err() {
            return;
        }
        match (tag, wire) {
            (1, WireType::LengthDelimited) => counts[0] += 1,
            (5, WireType::LengthDelimited) => counts[1] += 1,
            (13, WireType::LengthDelimited) => counts[2] += 1,
            _ => {}
        }
    }
}

/// The main graph: its small fields decoded, its large repeated ones left encoded.
pub(crate) struct Shell {
    pub model: ModelProto,
    pub graph: GraphProto,
    /// How the graph's lazily decoded messages change its encoded length (see [`Lazy`]).
    pub shrink: Cell<i64>,
}

impl Shell {
    /// Decodes the outer levels; `None` when the model has no graph.
    pub fn decode(bytes: Bytes) -> Result<Self, prost::DecodeError> {
        let model = ModelProto::decode(bytes)?;
        let mut graph = GraphProto::default();
        // the three long lists sized first: grown one push at a time, the node list of a graph of
        // 100,000 nodes was copied 17 times, each time into fresh pages
        let mut counts = [0usize; 3];
        for g in &model.graph {
            count_lists(g, &mut counts);
        }
        graph.node.reserve(counts[0]);
        graph.initializer.reserve(counts[1]);
        graph.value_info.reserve(counts[2]);
        for g in &model.graph {
            graph.merge(g.clone()).map_err(|mut e| {
                e.push("ModelProto", "graph");
                e
            })?;
        }
        Ok(Shell {
            model,
            graph,
            shrink: Cell::new(0),
        })
    }

    pub fn has_graph(&self) -> bool {
        !self.model.graph.is_empty()
    }

    pub fn nodes(&self) -> Lazy<'_, pb::NodeProto> {
        self.lazy(&self.graph.node, 1, "GraphProto.node")
    }

    pub fn initializers(&self) -> Lazy<'_, pb::TensorProto> {
        self.lazy(&self.graph.initializer, 5, "GraphProto.initializer")
    }

    pub fn value_infos(&self) -> Lazy<'_, pb::ValueInfoProto> {
        self.lazy(&self.graph.value_info, 13, "GraphProto.value_info")
    }

    fn lazy<'a, T>(&'a self, items: &'a [Bytes], tag: u32, field: &'static str) -> Lazy<'a, T> {
        Lazy::Encoded {
            items,
            tag,
            field,
            shrink: &self.shrink,
        }
    }

    /// The length prost would encode the whole model in, once every lazy message has been read:
    /// less than the input when fields unknown to this schema were dropped.
    pub fn encoded_len(&self) -> usize {
        let raw_graphs: i64 = self.model.graph.iter().map(|g| field_len(7, g.len())).sum();
        let graph = self.graph.encoded_len() as i64 + self.shrink.get();
        let graph = if self.has_graph() {
            field_len(7, graph.max(0) as usize)
        } else {
            0
        };
        (self.model.encoded_len() as i64 - raw_graphs + graph).max(0) as usize
    }

    /// Decodes every lazy message, for the first decoding error among them (in the order fields are
    /// usually written: nodes, initializers, value infos). Called when the graph could not be built,
    /// so that a corrupt message is reported before what a well-formed one might mean. The first
    /// `nodes_read` nodes and `inits_read` initializers, read into the IR already (so
    /// well-formed), are skipped: their bytes may have been given back
    /// ([`crate::util::pages::Spent`]).
    pub fn validate(&self, nodes_read: usize, inits_read: usize) -> Result<(), LazyError> {
        let nodes = self.nodes();
        for i in nodes_read.min(nodes.len())..nodes.len() {
            nodes.get(i)?;
        }
        let inits = self.initializers();
        for i in inits_read.min(inits.len())..inits.len() {
            inits.get(i)?;
        }
        for v in self.value_infos().iter() {
            v?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(name: &str) -> pb::AttributeProto {
        pb::AttributeProto {
            name: Some(name.into()),
            r#type: Some(7),
            ints: vec![1, -1, 300],
            ..Default::default()
        }
    }

    fn conv() -> pb::NodeProto {
        pb::NodeProto {
            input: vec!["x".into(), String::new(), "βeta".into()],
            output: vec!["y".into(), "z".into()],
            name: Some(String::new()),
            op_type: Some("Conv".into()),
            domain: Some("ai.onnx".into()),
            overload: Some("o".into()),
            doc_string: Some("doc".into()),
            attribute: vec![
                attr("pads"),
                pb::AttributeProto {
                    name: Some("value".into()),
                    r#type: Some(4),
                    t: Some(Box::new(pb::TensorProto {
                        dims: vec![2],
                        data_type: Some(7),
                        raw_data: Some(Bytes::from_static(&[
                            1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                        ])),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                pb::AttributeProto {
                    name: Some("mode".into()),
                    s: Some(Bytes::from_static(b"constant")),
                    ..Default::default()
                },
                pb::AttributeProto {
                    name: Some("αll".into()),
                    r#type: Some(-2),
                    f: Some(0.5),
                    i: Some(-3),
                    floats: vec![1.0, -2.5],
                    strings: vec![Bytes::from_static(b"a"), Bytes::from_static(b"")],
                    doc_string: Some("d".into()),
                    ref_attr_name: Some("r".into()),
                    ..Default::default()
                },
            ],
            metadata_props: vec![pb::StringStringEntryProto {
                key: Some("namespace".into()),
                value: Some("m".into()),
            }],
            ..Default::default()
        }
    }

    /// Whether the view read `raw` as prost does: the same fields, and no bytes prost would drop.
    fn agrees(raw: &Bytes) -> Option<bool> {
        let mut lists = NodeLists::default();
        let v = NodeView::read(raw, &mut lists)?;
        let attribute: Vec<pb::AttributeProto> = lists
            .attributes
            .iter()
            .map(|a| pb::AttributeProto {
                name: a.name.map(str::to_string).or(a.proto.name.clone()),
                ..a.proto.clone()
            })
            .collect();
        let (ins, outs) = (&lists.inputs, &lists.outputs);
        let Ok(p) = pb::NodeProto::decode(raw.clone()) else {
            return Some(false);
        };
        Some(
            p.encoded_len() == raw.len()
                && v.name == p.name.as_deref()
                && v.op_type == p.op_type.as_deref()
                && v.domain == p.domain.as_deref()
                && *ins == p.input
                && *outs == p.output
                && attribute == p.attribute
                && v.metadata_props == p.metadata_props,
        )
    }

    /// The lists are sized from the encoded graph: as many as it was built with, whatever comes
    /// between them; a cut graph counts up to the cut.
    #[test]
    fn the_graph_lists_are_counted_before_they_are_decoded() {
        let g = pb::GraphProto {
            name: Some("g".into()),
            node: vec![conv(), pb::NodeProto::default(), conv()],
            initializer: vec![pb::TensorProto::default(); 5],
            value_info: vec![pb::ValueInfoProto::default(); 2],
            doc_string: Some("d".into()),
            ..Default::default()
        };
        let bytes = g.encode_to_vec();
        let mut counts = [0; 3];
        count_lists(&bytes, &mut counts);
        assert_eq!(counts, [3, 5, 2]);
        // two graph fields add up, as prost merges them
        count_lists(&bytes, &mut counts);
        assert_eq!(counts, [6, 10, 4]);
        let mut cut = [0; 3];
        count_lists(&bytes[..bytes.len() - 1], &mut cut);
        assert!(
            cut.iter().zip(&[3, 5, 2]).all(|(c, full)| c <= full),
            "{cut:?}"
        );
    }

    #[test]
    fn a_node_view_reads_what_prost_decodes() {
        for n in [
            conv(),
            pb::NodeProto::default(),
            pb::NodeProto {
                op_type: Some("Relu".into()),
                ..Default::default()
            },
        ] {
            assert_eq!(agrees(&Bytes::from(n.encode_to_vec())), Some(true), "{n:?}");
        }
    }

    #[test]
    fn a_node_view_leaves_to_prost_what_it_may_read_otherwise() {
        let encoded = |n: pb::NodeProto| n.encode_to_vec();
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut unknown = encoded(conv());
        unknown.extend_from_slice(&[0x92, 0x03, 1, b'a']); // field 50, 1 byte
        cases.push(("an unknown field", unknown));
        let mut twice = encoded(conv());
        twice.extend_from_slice(&[0x1a, 1, b'n']); // name again
        cases.push(("a name given twice", twice));
        cases.push(("a key longer than it needs", vec![0xa2, 0x00, 1, b'R']));
        cases.push((
            "a length longer than it needs",
            vec![0x22, 0x81, 0x00, b'R'],
        ));
        cases.push(("text that is not UTF-8", vec![0x0a, 2, 0xff, 0xfe]));
        cases.push(("a name as a varint", vec![0x18, 1]));
        cases.push(("a length past the end", vec![0x22, 5, b'R']));
        let mut graph = conv();
        graph.attribute.push(pb::AttributeProto {
            name: Some("body".into()),
            g: Some(Box::default()),
            ..Default::default()
        });
        cases.push(("an attribute holding a graph", encoded(graph)));
        let mut inner = attr("pads").encode_to_vec();
        inner.extend_from_slice(&[0x92, 0x03, 0]); // field 50 of the attribute
        let mut odd = vec![0x2a, inner.len() as u8];
        odd.extend_from_slice(&inner);
        cases.push(("an attribute with an unknown field", odd));
        // prost reads packed ints and writes them unpacked (longer, from three)
        cases.push((
            "packed ints",
            vec![0x2a, 8, 0x0a, 1, b'p', 0x42, 3, 1, 2, 3],
        ));
        cases.push((
            "an attribute's type past 32 bits",
            vec![0x2a, 9, 0xa0, 0x01, 0x80, 0x80, 0x80, 0x80, 0x10, 0x0a, 0],
        ));
        let mut device = encoded(conv());
        device.extend_from_slice(&[0x52, 0]);
        cases.push(("device configurations", device));
        for (what, raw) in cases {
            let raw = Bytes::from(raw);
            let mut lists = NodeLists::default();
            assert!(NodeView::read(&raw, &mut lists).is_none(), "{what}");
        }
    }

    /// Every byte of `good` overwritten by each of a few values, and `good` cut at every byte:
    /// wherever the view reads a variant, prost decodes it to the same fields and re-encodes it to
    /// the same length (`agrees`); and the view reads more variants than there are bytes.
    fn damaged_variants_agree(good: &[u8], agrees: fn(&Bytes) -> Option<bool>) {
        let mut taken = 0;
        for at in 0..good.len() {
            for b in [0x00, 0x01, 0x7f, 0x80, 0xff, good[at] ^ 0x08] {
                let mut raw = good.to_vec();
                raw[at] = b;
                for raw in [raw.clone(), good[..at].to_vec()] {
                    if let Some(ok) = agrees(&Bytes::from(raw)) {
                        assert!(ok, "byte {at} set to {b:#x}");
                        taken += 1;
                    }
                }
            }
        }
        assert!(taken > good.len(), "the view took {taken} of the variants");
    }

    #[test]
    fn a_node_view_of_any_damaged_node_reads_as_prost_or_not_at_all() {
        damaged_variants_agree(&conv().encode_to_vec(), agrees);
    }

    fn weights() -> pb::TensorProto {
        pb::TensorProto {
            name: Some("w.βeight".into()),
            dims: vec![8, 3, 0, 1 << 40],
            data_type: Some(1),
            data_location: Some(1),
            external_data: vec![
                pb::StringStringEntryProto {
                    key: Some("location".into()),
                    value: Some("\u{0}nnlint:self".into()),
                },
                pb::StringStringEntryProto {
                    key: Some("offset".into()),
                    value: Some("123".into()),
                },
                pb::StringStringEntryProto {
                    key: None,
                    value: Some(String::new()),
                },
            ],
            ..Default::default()
        }
    }

    /// Whether the view read `raw` as prost does (see [`agrees`]).
    fn tensor_agrees(raw: &Bytes) -> Option<bool> {
        let v = TensorView::read(raw)?;
        let Ok(p) = pb::TensorProto::decode(raw.clone()) else {
            return Some(false);
        };
        let entries: Vec<(&str, &str)> = p
            .external_data
            .iter()
            .map(|e| {
                (
                    e.key.as_deref().unwrap_or(""),
                    e.value.as_deref().unwrap_or(""),
                )
            })
            .collect();
        Some(
            p.encoded_len() == raw.len()
                && v.name == p.name.as_deref().unwrap_or("")
                && v.data_type == p.data_type
                && v.dims == p.dims
                && v.raw_data == p.raw_data
                && v.external_data == entries
                && v.data_location == p.data_location
                && p == pb::TensorProto {
                    name: p.name.clone(),
                    data_type: p.data_type,
                    dims: p.dims.clone(),
                    raw_data: p.raw_data.clone(),
                    external_data: p.external_data.clone(),
                    data_location: p.data_location,
                    ..Default::default()
                },
        )
    }

    #[test]
    fn a_tensor_view_reads_what_prost_decodes() {
        let inline = pb::TensorProto {
            name: Some("shape".into()),
            dims: vec![2],
            data_type: Some(7),
            raw_data: Some(Bytes::from_static(&[
                4, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255,
            ])),
            ..Default::default()
        };
        for t in [weights(), inline, pb::TensorProto::default()] {
            assert_eq!(
                tensor_agrees(&Bytes::from(t.encode_to_vec())),
                Some(true),
                "{t:?}"
            );
        }
    }

    #[test]
    fn a_tensor_view_leaves_to_prost_what_it_may_read_otherwise() {
        let encoded = |t: pb::TensorProto| t.encode_to_vec();
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "typed values",
                encoded(pb::TensorProto {
                    float_data: vec![1.0],
                    ..weights()
                }),
            ),
            ("packed dims", vec![0x0a, 2, 1, 2]),
            ("a negative data type", {
                let mut v = vec![0x10];
                prost::encoding::encode_varint(-1i64 as u64, &mut v);
                v
            }),
            ("a data type longer than it needs", vec![0x10, 0x81, 0x00]),
            (
                "an entry with an unknown field",
                vec![0x6a, 3, 0x1a, 1, b'x'],
            ),
            (
                "an entry's key twice",
                vec![0x6a, 6, 0x0a, 1, b'a', 0x0a, 1, b'b'],
            ),
            ("a name that is not UTF-8", vec![0x42, 1, 0xff]),
        ];
        let mut twice = encoded(weights());
        twice.extend_from_slice(&[0x42, 1, b'n']);
        cases.push(("a name given twice", twice));
        let mut unknown = encoded(weights());
        unknown.extend_from_slice(&[0x92, 0x03, 1, b'a']);
        cases.push(("an unknown field", unknown));
        for (what, raw) in cases {
            assert!(TensorView::read(&Bytes::from(raw)).is_none(), "{what}");
        }
    }

    #[test]
    fn a_tensor_view_of_any_damaged_tensor_reads_as_prost_or_not_at_all() {
        damaged_variants_agree(&weights().encode_to_vec(), tensor_agrees);
    }
}
