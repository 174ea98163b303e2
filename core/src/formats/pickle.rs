//! A restricted pickle reader that executes nothing: a small stack machine
//! over the opcodes `torch.save` (protocol 2, or a later one) and
//! TorchScript's `data.pkl` / `constants.pkl` use, enough to find the
//! storages (`BINPERSID ('storage', torch.FloatStorage, key, location,
//! numel)`), the tensors that view them (`torch._utils._rebuild_tensor_v2`,
//! `_rebuild_parameter`), and the dict keys and object attributes that name
//! those tensors.
//!
//! `GLOBAL` only records a module and a name; `REDUCE` and `NEWOBJ` build
//! opaque values (except the few torch functions above and
//! `collections.OrderedDict`). Any opcode it does not know, a broken
//! structure, or a limit reached stops the machine: what was found so far
//! is returned (storages of known dtype stay usable), never an error.

use std::collections::HashMap;

use crate::dtype::Dtype;

/// Most opcodes executed.
pub(crate) const MAX_OPS: usize = 64 << 20;
/// Deepest value stack.
pub(crate) const MAX_STACK: usize = 1 << 16;
/// Deepest `MARK` nesting.
pub(crate) const MAX_MARKS: usize = 1 << 10;
/// Most memo entries.
pub(crate) const MAX_MEMO: usize = 1 << 22;
/// Most values built (every pushed value is one).
pub(crate) const MAX_VALUES: usize = 1 << 23;
/// Longest string kept (longer ones are skipped as opaque values).
pub(crate) const MAX_STR: usize = 1 << 16;
/// Deepest container nesting followed when naming tensors.
pub(crate) const MAX_DEPTH: usize = 64;
/// Most dimensions of a tensor's size.
pub(crate) const MAX_DIMS: usize = 32;

/// Index of a value in the machine's arena.
type Id = usize;

#[derive(Debug, Clone)]
enum Value {
    None,
    Bool,
    Int(i64),
    Str(String),
    Global(String, String),
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    /// `REDUCE` of a function this reader does not know: its arguments
    /// (where tensors may still be named).
    Call(Id),
    /// `NEWOBJ`: the state `BUILD` gave it.
    Obj(Option<Id>),
    /// Index into [`Unpickled::storages`].
    Storage(usize),
    /// Index into [`Unpickled::tensors`].
    Tensor(usize),
    /// Anything else (floats, bytes, sets, long strings...).
    Other,
}

/// A storage `BINPERSID` named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Storage {
    /// Its key: the entry `data/<key>` of the archive.
    pub key: String,
    /// Element type, when the storage type names a known one.
    pub dtype: Option<Dtype>,
    /// Elements, as the pickle states it.
    pub numel: Option<u64>,
}

/// A tensor `_rebuild_tensor_v2` built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tensor {
    /// Index into [`Unpickled::storages`].
    pub storage: usize,
    /// First element in the storage.
    pub offset: u64,
    /// Size (shape).
    pub size: Vec<u64>,
    /// Strides, in elements.
    pub stride: Vec<u64>,
    /// The keys and attributes that lead to it from the pickled root (or
    /// the stack, when the machine stopped early); `None` when unreached.
    pub path: Option<Vec<String>>,
}

impl Tensor {
    /// Whether it views `numel` elements from the start, row-major.
    pub fn is_whole(&self, numel: u64) -> bool {
        if self.offset != 0 || self.size.len() != self.stride.len() {
            return false;
        }
        let mut expect = 1u64;
        for (&n, &s) in self.size.iter().zip(&self.stride).rev() {
            if n != 1 && s != expect {
                return false;
            }
            let Some(e) = expect.checked_mul(n) else {
                return false;
            };
            expect = e;
        }
        expect == numel
    }
}

/// What the machine found.
#[derive(Debug, Default)]
pub(crate) struct Unpickled {
    /// Every storage, in first-seen order, each key once.
    pub storages: Vec<Storage>,
    /// Every tensor.
    pub tensors: Vec<Tensor>,
    /// Why it stopped before `STOP`, if it did.
    pub stopped: Option<String>,
}

/// The element type a storage class (`torch.HalfStorage`) or a dtype
/// (`torch.float16`, the typed-storage spelling) names.
pub(crate) fn storage_dtype(module: &str, name: &str) -> Option<Dtype> {
    if module != "torch" {
        return None;
    }
    Some(match name {
        "FloatStorage" | "float32" | "float" => Dtype::F32,
        "HalfStorage" | "float16" | "half" => Dtype::F16,
        "BFloat16Storage" | "bfloat16" => Dtype::BF16,
        "DoubleStorage" | "float64" | "double" => Dtype::F64,
        "LongStorage" | "int64" | "long" => Dtype::I64,
        "IntStorage" | "int32" | "int" => Dtype::I32,
        "ShortStorage" | "int16" | "short" => Dtype::I16,
        "CharStorage" | "int8" => Dtype::I8,
        "ByteStorage" | "uint8" => Dtype::U8,
        "BoolStorage" | "bool" => Dtype::Bool,
        "uint16" => Dtype::U16,
        "uint32" => Dtype::U32,
        "uint64" => Dtype::U64,
        "float8_e4m3fn" => Dtype::F8E4M3,
        "float8_e5m2" => Dtype::F8E5M2,
        _ => return None,
    })
}

/// Run the machine over `data` (a whole pickle).
pub(crate) fn load(data: &[u8]) -> Unpickled {
    let mut m = Machine {
        data,
        pos: 0,
        vals: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        out: Unpickled::default(),
        keys: HashMap::new(),
    };
    let root = match m.run() {
        Ok(root) => vec![root],
        Err(why) => {
            m.out.stopped = Some(format!("pickle byte {}: {why}", m.pos));
            m.stack.clone()
        }
    };
    m.name_tensors(&root);
    m.out
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    vals: Vec<Value>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u32, Id>,
    out: Unpickled,
    keys: HashMap<String, usize>,
}

type Step<T> = Result<T, String>;

impl Machine<'_> {
    fn take(&mut self, n: usize) -> Step<&[u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| format!("{n} bytes past the end"))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Step<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Step<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Step<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Step<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn len_of(n: u64) -> Step<usize> {
        usize::try_from(n).map_err(|_| format!("length {n}"))
    }
    /// A line ending in `\n` (for `GLOBAL`), at most [`MAX_STR`] bytes.
    fn line(&mut self) -> Step<String> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .take(MAX_STR)
            .position(|&b| b == b'\n')
            .ok_or("GLOBAL line without an end")?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }

    fn alloc(&mut self, v: Value) -> Step<Id> {
        if self.vals.len() >= MAX_VALUES {
            return Err(format!("more than {MAX_VALUES} values"));
        }
        self.vals.push(v);
        Ok(self.vals.len() - 1)
    }
    fn push_id(&mut self, id: Id) -> Step<()> {
        if self.stack.len() >= MAX_STACK {
            return Err(format!("stack deeper than {MAX_STACK}"));
        }
        self.stack.push(id);
        Ok(())
    }
    fn push(&mut self, v: Value) -> Step<()> {
        let id = self.alloc(v)?;
        self.push_id(id)
    }
    fn pop(&mut self) -> Step<Id> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("pop of an empty stack".into());
        }
        Ok(self.stack.pop().expect("checked"))
    }
    fn top(&self) -> Step<Id> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err("empty stack".into());
        }
        Ok(*self.stack.last().expect("checked"))
    }
    /// The items since the last `MARK`, which is dropped.
    fn pop_mark(&mut self) -> Step<Vec<Id>> {
        let m = self.marks.pop().ok_or("no MARK")?;
        Ok(self.stack.split_off(m))
    }
    fn memo_put(&mut self, key: u32) -> Step<()> {
        let id = self.top()?;
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&key) {
            return Err(format!("more than {MAX_MEMO} memo entries"));
        }
        self.memo.insert(key, id);
        Ok(())
    }
    fn memo_get(&mut self, key: u32) -> Step<()> {
        let id = *self
            .memo
            .get(&key)
            .ok_or_else(|| format!("memo {key} missing"))?;
        self.push_id(id)
    }
    fn string(&mut self, n: u64, text: bool) -> Step<()> {
        let n = Self::len_of(n)?;
        let b = self.take(n)?;
        let v = if text && n <= MAX_STR {
            Value::Str(String::from_utf8_lossy(b).into_owned())
        } else {
            Value::Other
        };
        self.push(v)
    }
    fn int_of(&self, id: Id) -> Option<i64> {
        match self.vals[id] {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }
    fn str_of(&self, id: Id) -> Option<&str> {
        match &self.vals[id] {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    fn items(&self, id: Id) -> Option<&[Id]> {
        match &self.vals[id] {
            Value::Tuple(t) | Value::List(t) => Some(t),
            _ => None,
        }
    }
    fn ints(&self, id: Id) -> Option<Vec<u64>> {
        let t = self.items(id)?;
        if t.len() > MAX_DIMS {
            return None;
        }
        t.iter()
            .map(|&i| self.int_of(i).and_then(|v| u64::try_from(v).ok()))
            .collect()
    }

    /// `BINPERSID`: a `('storage', type, key, location, numel)` tuple.
    fn persistent(&mut self, pid: Id) -> Step<Value> {
        let Some(t) = self.items(pid) else {
            return Ok(Value::Other);
        };
        if t.len() < 5 || self.str_of(t[0]) != Some("storage") {
            return Ok(Value::Other);
        }
        let (ty, key, numel) = (t[1], t[2], t[4]);
        let dtype = match &self.vals[ty] {
            Value::Global(m, n) => storage_dtype(m, n),
            _ => None,
        };
        let numel = self.int_of(numel).and_then(|n| u64::try_from(n).ok());
        let Some(key) = self.str_of(key).map(str::to_owned) else {
            return Ok(Value::Other);
        };
        if let Some(&i) = self.keys.get(&key) {
            let s = &mut self.out.storages[i];
            if s.dtype != dtype {
                s.dtype = None;
            }
            if s.numel != numel {
                s.numel = None;
            }
            return Ok(Value::Storage(i));
        }
        if self.out.storages.len() >= MAX_VALUES {
            return Err("too many storages".into());
        }
        self.keys.insert(key.clone(), self.out.storages.len());
        self.out.storages.push(Storage { key, dtype, numel });
        Ok(Value::Storage(self.out.storages.len() - 1))
    }

    /// `REDUCE`: the torch rebuild functions and `OrderedDict()` are
    /// understood; anything else is an opaque call.
    fn reduce(&mut self, func: Id, args: Id, depth: usize) -> Step<Value> {
        let name = match &self.vals[func] {
            Value::Global(m, n) => (m.as_str(), n.as_str()),
            _ => ("", ""),
        };
        let a = self.items(args).map(<[Id]>::to_vec).unwrap_or_default();
        match name {
            ("collections", "OrderedDict") if a.is_empty() => return Ok(Value::Dict(vec![])),
            ("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor") if a.len() >= 4 => {
                if let (Value::Storage(storage), Some(offset), Some(size), Some(stride)) = (
                    &self.vals[a[0]],
                    self.int_of(a[1]).and_then(|o| u64::try_from(o).ok()),
                    self.ints(a[2]),
                    self.ints(a[3]),
                ) {
                    self.out.tensors.push(Tensor {
                        storage: *storage,
                        offset,
                        size,
                        stride,
                        path: None,
                    });
                    return Ok(Value::Tensor(self.out.tensors.len() - 1));
                }
            }
            ("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state")
                if !a.is_empty() =>
            {
                return Ok(self.vals[a[0]].clone());
            }
            ("torch._tensor", "_rebuild_from_type_v2") if a.len() >= 3 && depth == 0 => {
                return self.reduce(a[0], a[2], 1);
            }
            _ => {}
        }
        Ok(Value::Call(args))
    }

    /// Execute until `STOP`; the value it returns.
    fn run(&mut self) -> Step<Id> {
        for _ in 0..MAX_OPS {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?; // PROTO
                }
                0x95 => {
                    self.u64()?; // FRAME: its length only groups opcodes
                }
                b'.' => return self.pop(),
                b'(' => {
                    if self.marks.len() >= MAX_MARKS {
                        return Err(format!("MARKs nested deeper than {MAX_MARKS}"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.push_id(t)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 | 0x89 => self.push(Value::Bool)?,
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Value::Int(v as i64))?;
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(v as i64))?;
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Value::Int(v as i64))?;
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.u8()? as u64
                    } else {
                        self.u32()? as u64
                    };
                    let b = self.take(Self::len_of(n)?)?;
                    let v = if b.is_empty() {
                        Value::Int(0)
                    } else if b.len() <= 8 {
                        let fill = if b[b.len() - 1] & 0x80 != 0 { 0xff } else { 0 };
                        let mut w = [fill; 8];
                        w[..b.len()].copy_from_slice(b);
                        Value::Int(i64::from_le_bytes(w))
                    } else {
                        Value::Other
                    };
                    self.push(v)?;
                }
                b'G' => {
                    self.take(8)?;
                    self.push(Value::Other)?;
                }
                b'X' => {
                    let n = self.u32()? as u64;
                    self.string(n, true)?;
                }
                0x8c => {
                    let n = self.u8()? as u64;
                    self.string(n, true)?;
                }
                0x8d => {
                    let n = self.u64()?;
                    self.string(n, true)?;
                }
                b'T' => {
                    let n = self.u32()? as i32;
                    let n = u64::try_from(n).map_err(|_| "negative BINSTRING length")?;
                    self.string(n, true)?;
                }
                b'U' => {
                    let n = self.u8()? as u64;
                    self.string(n, true)?;
                }
                b'B' => {
                    let n = self.u32()? as u64;
                    self.string(n, false)?;
                }
                b'C' => {
                    let n = self.u8()? as u64;
                    self.string(n, false)?;
                }
                0x8e | 0x96 => {
                    let n = self.u64()?;
                    self.string(n, false)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Value::Global(module, name))?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let v = match (self.str_of(module), self.str_of(name)) {
                        (Some(m), Some(n)) => Value::Global(m.to_owned(), n.to_owned()),
                        _ => return Err("STACK_GLOBAL of non-strings".into()),
                    };
                    self.push(v)?;
                }
                b'q' => {
                    let k = self.u8()? as u32;
                    self.memo_put(k)?;
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = u32::try_from(self.memo.len()).map_err(|_| "memo full")?;
                    self.memo_put(k)?;
                }
                b'h' => {
                    let k = self.u8()? as u32;
                    self.memo_get(k)?;
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(k)?;
                }
                b'}' => self.push(Value::Dict(vec![]))?,
                b']' => self.push(Value::List(vec![]))?,
                b')' => self.push(Value::Tuple(vec![]))?,
                0x8f => self.push(Value::Other)?, // EMPTY_SET
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Value::Tuple(items))?;
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Value::List(items))?;
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = items.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                    self.push(Value::Dict(pairs))?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Value::Tuple(items))?;
                }
                0x90 | 0x91 => {
                    // ADDITEMS (to a set) / FROZENSET: contents not kept.
                    self.pop_mark()?;
                    if op == 0x91 {
                        self.push(Value::Other)?;
                    }
                }
                b'a' => {
                    let v = self.pop()?;
                    let l = self.top()?;
                    if let Value::List(items) = &mut self.vals[l] {
                        items.push(v);
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let l = self.top()?;
                    if let Value::List(l) = &mut self.vals[l] {
                        l.extend(items);
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?;
                    if let Value::Dict(d) = &mut self.vals[d] {
                        d.push((k, v));
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let d = self.top()?;
                    if let Value::Dict(d) = &mut self.vals[d] {
                        d.extend(items.chunks_exact(2).map(|p| (p[0], p[1])));
                    }
                }
                b'R' => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    let v = self.reduce(func, args, 0)?;
                    self.push(v)?;
                }
                0x81 => {
                    self.pop()?; // args
                    self.pop()?; // class
                    self.push(Value::Obj(None))?;
                }
                0x92 => {
                    self.pop()?; // kwargs
                    self.pop()?; // args
                    self.pop()?; // class
                    self.push(Value::Obj(None))?;
                }
                b'b' => {
                    let state = self.pop()?;
                    let o = self.top()?;
                    if let Value::Obj(s) = &mut self.vals[o] {
                        *s = Some(state);
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent(pid)?;
                    self.push(v)?;
                }
                _ => return Err(format!("opcode {op:#04x} not read")),
            }
        }
        Err(format!("more than {MAX_OPS} opcodes"))
    }

    /// Give each reachable tensor the path of keys from `roots` (first
    /// path found, depth-first, each container once).
    fn name_tensors(&mut self, roots: &[Id]) {
        let mut seen = vec![false; self.vals.len()];
        let mut path = Vec::new();
        for &r in roots {
            self.walk(r, &mut path, 0, &mut seen);
        }
    }

    fn walk(&mut self, id: Id, path: &mut Vec<String>, depth: usize, seen: &mut [bool]) {
        if depth > MAX_DEPTH || std::mem::replace(&mut seen[id], true) {
            return;
        }
        let children: Vec<(Option<String>, Id)> = match &self.vals[id] {
            Value::Tensor(t) => {
                let t = &mut self.out.tensors[*t];
                if t.path.is_none() {
                    t.path = Some(path.clone());
                }
                return;
            }
            Value::Dict(d) => d
                .iter()
                .filter_map(|&(k, v)| {
                    let key = match &self.vals[k] {
                        Value::Str(s) => s.clone(),
                        Value::Int(i) => i.to_string(),
                        _ => return None,
                    };
                    Some((Some(key), v))
                })
                .collect(),
            Value::List(l) | Value::Tuple(l) => l
                .iter()
                .enumerate()
                .map(|(i, &v)| (Some(i.to_string()), v))
                .collect(),
            Value::Obj(Some(s)) => vec![(None, *s)],
            Value::Call(a) => vec![(None, *a)],
            _ => return,
        };
        for (key, child) in children {
            let pushed = key.map(|k| path.push(k)).is_some();
            self.walk(child, path, depth + 1, seen);
            if pushed {
                path.pop();
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A protocol-2 pickle of `{name: _rebuild_tensor_v2(storage(key,
    /// dtype, numel), offset, size, stride, False, OrderedDict())}` for
    /// each tensor, as torch.save writes it.
    /// (name, storage type, key, numel, offset, size) of one tensor.
    pub(crate) type Spec<'a> = (&'a str, &'a str, &'a str, u64, u64, &'a [u64]);

    pub(crate) fn state_dict(tensors: &[Spec]) -> Vec<u8> {
        let mut p = vec![0x80, 2, b'}', b'q', 0, b'('];
        let mut memo = 1u32;
        let mut put = |p: &mut Vec<u8>| {
            p.push(b'r');
            p.extend_from_slice(&memo.to_le_bytes());
            memo += 1;
        };
        let uni = |p: &mut Vec<u8>, s: &str| {
            p.push(b'X');
            p.extend_from_slice(&(s.len() as u32).to_le_bytes());
            p.extend_from_slice(s.as_bytes());
        };
        let int = |p: &mut Vec<u8>, v: u64| {
            p.push(b'J');
            p.extend_from_slice(&(v as u32).to_le_bytes());
        };
        for &(name, storage, key, numel, offset, size) in tensors {
            uni(&mut p, name);
            put(&mut p);
            p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n");
            put(&mut p);
            p.extend_from_slice(b"((");
            uni(&mut p, "storage");
            p.extend_from_slice(format!("ctorch\n{storage}\n").as_bytes());
            uni(&mut p, key);
            uni(&mut p, "cpu");
            int(&mut p, numel);
            p.extend_from_slice(b"tQ");
            int(&mut p, offset);
            p.push(b'(');
            for &s in size {
                int(&mut p, s);
            }
            p.push(b't');
            p.push(b'(');
            let mut stride = vec![1u64; size.len()];
            for i in (0..size.len().saturating_sub(1)).rev() {
                stride[i] = stride[i + 1] * size[i + 1];
            }
            for s in stride {
                int(&mut p, s);
            }
            p.extend_from_slice(b"t\x89ccollections\nOrderedDict\n)RtR");
            put(&mut p);
        }
        p.extend_from_slice(b"u.");
        p
    }

    #[test]
    fn reads_a_state_dict() {
        let p = state_dict(&[
            ("a.weight", "HalfStorage", "0", 6, 0, &[2, 3]),
            ("a.bias", "float32", "1", 4, 1, &[3]),
            ("b", "ComplexFloatStorage", "2", 2, 0, &[2]),
        ]);
        let u = load(&p);
        assert_eq!(u.stopped, None);
        assert_eq!(u.storages.len(), 3);
        assert_eq!(u.storages[0].dtype, Some(Dtype::F16));
        assert_eq!(u.storages[1].dtype, Some(Dtype::F32));
        assert_eq!(u.storages[2].dtype, None);
        assert_eq!(u.tensors[0].path, Some(vec!["a.weight".to_string()]));
        assert!(u.tensors[0].is_whole(6));
        assert!(!u.tensors[1].is_whole(4));
        assert_eq!(u.tensors[1].size, [3]);
    }

    #[test]
    fn stops_and_keeps_what_it_found() {
        let mut p = state_dict(&[("a", "BFloat16Storage", "0", 4, 0, &[4])]);
        p.pop(); // STOP
        p.pop(); // SETITEMS
        p.extend_from_slice(b"\xffjunk");
        let u = load(&p);
        assert!(u.stopped.unwrap().contains("0xff"));
        assert_eq!(u.storages[0].dtype, Some(Dtype::BF16));
        // Named from the stack: the dict is not built, the key is gone.
        assert!(u.tensors[0].path.is_some());
    }

    #[test]
    fn hostile_pickles_stop() {
        let deep_marks = vec![b'('; 1_000_000];
        assert!(load(&deep_marks).stopped.unwrap().contains("MARK"));
        let deep_lists = vec![b']'; 1_000_000];
        assert!(load(&deep_lists).stopped.unwrap().contains("stack"));
        // A list nested in itself a million times with a constant stack,
        // and a list containing itself: the naming walk is bounded.
        let mut p = b"]q\x00q\x020".to_vec();
        for _ in 0..1_000_000 {
            p.extend_from_slice(b"h\x00]q\x01a0h\x01q\x000");
        }
        p.extend_from_slice(b"h\x00h\x02a0h\x02.");
        let u = load(&p);
        assert_eq!(u.stopped, None);
        assert!(load(b"\x80\x02h\x07.").stopped.unwrap().contains("memo 7"));
        assert!(load(b"X\xff\xff\xff\xffab.").stopped.is_some());
        assert!(
            load(b"\x8d\xff\xff\xff\xff\xff\xff\xff\xffab.")
                .stopped
                .is_some()
        );
        assert!(load(b"Q.").stopped.is_some());
        assert!(load(b"").stopped.is_some());
        assert!(load(b"t").stopped.is_some());
        assert!(load(b"(s.").stopped.is_some());
        assert!(load(b"Kc\n").stopped.is_some());
    }

    #[test]
    fn truncation_at_every_length() {
        let p = state_dict(&[("x", "FloatStorage", "0", 8, 0, &[2, 4])]);
        for n in 0..p.len() {
            let u = load(&p[..n]);
            assert!(u.stopped.is_some(), "cut at {n}");
        }
    }

    #[test]
    fn names_torchscript_attributes() {
        // An object (NEWOBJ) whose BUILD state holds a submodule holding
        // the tensor, as TorchScript's data.pkl does.
        let inner = state_dict(&[("weight", "FloatStorage", "0", 4, 0, &[4])]);
        let body = &inner[2..inner.len() - 1];
        let mut p = b"\x80\x02c__torch__.Top\nTop\n)\x81}X\x03\x00\x00\x00enc".to_vec();
        p.extend_from_slice(b"c__torch__.Enc\nEnc\n)\x81");
        p.extend_from_slice(body);
        p.extend_from_slice(b"bsb.");
        let u = load(&p);
        assert_eq!(u.stopped, None);
        assert_eq!(
            u.tensors[0].path,
            Some(vec!["enc".to_string(), "weight".to_string()])
        );
    }
}
