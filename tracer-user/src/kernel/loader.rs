//! The kernel object parsed again with aya-obj and prepared exactly as aya prepared it
//! (globals, object BTF, CO-RE, map and call relocations against aya's maps), so that programs
//! aya 0.14 cannot load (BPF netfilter, fentry/fexit against module BTF) are loaded with the raw
//! `BPF_PROG_LOAD` of [`crate::kernel::sys`], with a verifier log when the kernel refuses them.

use std::{
    collections::{HashMap, HashSet},
    io,
    os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd},
};

use aya::maps::{Map, MapData};
use aya_obj::{
    Object, ParseError,
    btf::{BtfError as ObjectBtfError, BtfRelocationError},
    generated::{bpf_attach_type, bpf_insn, bpf_prog_type},
    relocation::EbpfRelocationError,
};
use thiserror::Error;

use crate::kernel::sys::{self, ProgBtf, ProgLoad};

/// Failures to prepare the kernel object as aya prepared it.
#[derive(Debug, Error)]
pub enum PrepareError {
    /// The kernel object is not an eBPF ELF aya-obj can read.
    #[error("parsing the eBPF object failed")]
    Parse(#[source] ParseError),
    /// A global does not exist in the object or has the wrong size.
    #[error("setting the eBPF object's globals failed (names and sizes must match the object)")]
    Globals(#[source] ParseError),
    /// The object's BTF could not be fixed up for the kernel.
    #[error("preparing the eBPF object's BTF failed")]
    ObjectBtf(#[source] ObjectBtfError),
    /// CO-RE relocations need the kernel's BTF, which could not be read.
    #[error("reading /sys/kernel/btf/vmlinux for the object's CO-RE relocations failed")]
    KernelBtf(#[source] ObjectBtfError),
    /// CO-RE relocations could not be applied.
    #[error("applying the eBPF object's CO-RE relocations failed")]
    CoreRelocation(#[source] BtfRelocationError),
    /// A map of the object is not among the maps aya created.
    #[error(
        "map {name} of the eBPF object is not in the aya `Ebpf`: load the same object with aya \
         first, and load the netfilter programs before taking maps out with `Ebpf::take_map`"
    )]
    MissingMap { name: String },
    /// Map or call relocation failed.
    #[error("relocating the eBPF object's {what} failed")]
    Relocation {
        what: &'static str,
        #[source]
        source: EbpfRelocationError,
    },
}

/// Verifier log sizes tried, in turn, after a load without a log failed. Kernels from 6.4 keep
/// the log's end when it overflows (`ENOSPC`), which is the part that says what failed.
const LOG_SIZES: [usize; 2] = [1 << 20, 16 << 20];

/// The map data behind any kind of aya map.
fn map_data(map: &Map) -> &MapData {
    match map {
        Map::Array(d)
        | Map::ArrayOfMaps(d)
        | Map::BloomFilter(d)
        | Map::CgroupArray(d)
        | Map::CgroupStorage(d)
        | Map::CgrpStorage(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::HashOfMaps(d)
        | Map::InodeStorage(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuCgroupStorage(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::ReusePortSockArray(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::SkStorage(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    }
}

/// Why the kernel did not load a program: the first error (without a log) and the verifier
/// log of the retry, empty when the kernel refused before verification.
#[derive(Debug)]
pub struct LoadFailure {
    pub errno: io::Error,
    pub log: String,
}

/// Loads without a verifier log (fast); on failure loads again with one to say why.
pub fn load_with_log(req: &ProgLoad<'_>) -> Result<OwnedFd, LoadFailure> {
    let errno = match sys::prog_load(req, &mut [], 0) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let mut log = Vec::new();
    for size in LOG_SIZES {
        log = vec![0u8; size];
        match sys::prog_load(req, &mut log, 1) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
            Err(_) => break,
        }
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let log = String::from_utf8_lossy(&log[..end]).trim_end().to_owned();
    Err(LoadFailure { errno, log })
}

/// What a program of a [`PreparedObject`] is loaded as.
#[derive(Clone, Copy, Debug)]
pub struct LoadAs<'a> {
    pub prog_type: bpf_prog_type,
    pub expected_attach_type: bpf_attach_type,
    /// Tracing programs: the kernel function's BTF id, and the module BTF holding it.
    pub attach_btf_id: u32,
    pub attach_btf_obj_fd: Option<BorrowedFd<'a>>,
}

/// The kernel object parsed again and prepared exactly as aya prepared it (globals, BTF,
/// relocations against aya's maps), to load the programs aya cannot: the netfilter programs
/// here, the fentry/fexit programs in [`crate::nat::probe`].
pub struct PreparedObject {
    obj: Object,
    btf_fd: Option<OwnedFd>,
}

impl PreparedObject {
    /// Prepares the kernel object `bytes`, using the maps `ebpf` created from the same bytes.
    ///
    /// `globals` must be what was given to `EbpfLoader::override_global` (name and the value's
    /// bytes, e.g. `KernelOffsets` through [`crate::kernel::btf::kernel_offsets_bytes`]): the values the
    /// programs see are in aya's `.rodata`/`.data` maps, and are patched here too so the object
    /// is prepared exactly as aya prepared it (sizes are checked, every name must exist). Call
    /// this before taking maps out of `ebpf` with `take_map`. The steps follow
    /// `EbpfLoader::load` (aya 0.14, src/bpf.rs): patch globals, fix up and load the object's
    /// BTF (for `func_info` and `line_info`; the programs load without it if the kernel refuses
    /// it), CO-RE relocations when there are any, map and call relocations, helper sanitising.
    pub fn new(
        bytes: &[u8],
        globals: &[(&str, &[u8])],
        ebpf: &aya::Ebpf,
    ) -> Result<Self, PrepareError> {
        let mut obj = Object::parse(bytes).map_err(PrepareError::Parse)?;
        let patches: HashMap<&str, (&[u8], bool)> =
            globals.iter().map(|&(n, b)| (n, (b, true))).collect();
        obj.patch_map_data(patches).map_err(PrepareError::Globals)?;
        let btf_fd = load_object_btf(&mut obj)?;
        if obj.has_btf_relocations() {
            let kernel = aya_obj::btf::Btf::from_sys_fs().map_err(PrepareError::KernelBtf)?;
            obj.relocate_btf(&kernel)
                .map_err(PrepareError::CoreRelocation)?;
        }
        relocate(&mut obj, ebpf)?;
        Ok(Self { obj, btf_fd })
    }

    /// The instructions of program `name`, to rewrite before loading; `None` when the object
    /// has no such program.
    pub fn instructions_mut(&mut self, name: &str) -> Option<&mut [bpf_insn]> {
        let key = self.obj.programs.get(name)?.function_key();
        Some(&mut self.obj.functions.get_mut(&key)?.instructions)
    }

    /// The names of the object's programs that start with `prefix`, sorted.
    #[must_use]
    pub fn program_names(&self, prefix: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .obj
            .programs
            .keys()
            .map(String::as_str)
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort_unstable();
        names
    }

    /// Loads program `name` as `how`; `Ok(None)` when the object has no such program.
    pub fn load(&self, name: &str, how: LoadAs<'_>) -> Result<Option<OwnedFd>, LoadFailure> {
        let Some(program) = self.obj.programs.get(name) else {
            return Ok(None);
        };
        let Some(function) = self.obj.functions.get(&program.function_key()) else {
            return Ok(None);
        };
        let func_info = function.func_info.func_info_bytes();
        let line_info = function.line_info.line_info_bytes();
        let btf = self.btf_fd.as_ref().map(|fd| ProgBtf {
            fd: fd.as_fd(),
            func_info: &func_info,
            func_info_rec_size: u32::try_from(function.func_info_rec_size).unwrap_or(0),
            line_info: &line_info,
            line_info_rec_size: u32::try_from(function.line_info_rec_size).unwrap_or(0),
        });
        load_with_log(&ProgLoad {
            prog_type: how.prog_type,
            expected_attach_type: how.expected_attach_type,
            name,
            insns: &function.instructions,
            license: &program.license,
            btf,
            attach_btf_id: how.attach_btf_id,
            attach_btf_obj_fd: how.attach_btf_obj_fd,
        })
        .map(Some)
    }
}

/// Fixes up the object's BTF for this kernel and loads it; `None` when the kernel has no BTF
/// support or refuses it (aya proceeds the same way for programs that do not need BTF).
fn load_object_btf(obj: &mut Object) -> Result<Option<OwnedFd>, PrepareError> {
    let Some(features) = aya::features().btf() else {
        return Ok(None);
    };
    let Some(btf) = obj
        .fixup_and_sanitize_btf(features)
        .map_err(PrepareError::ObjectBtf)?
    else {
        return Ok(None);
    };
    Ok(sys::btf_load(&btf.to_bytes()).ok())
}

/// Points the object's map references at aya's maps and links its function calls.
fn relocate(obj: &mut Object, ebpf: &aya::Ebpf) -> Result<(), PrepareError> {
    let maps: Vec<(String, aya_obj::Map)> = obj.maps.drain().collect();
    let mut with_fds = Vec::with_capacity(maps.len());
    for (name, map) in &maps {
        let data = ebpf
            .map(name)
            .map(map_data)
            .ok_or_else(|| PrepareError::MissingMap { name: name.clone() })?;
        with_fds.push((name.as_str(), data.fd().as_fd().as_raw_fd(), map));
    }
    let text_sections: HashSet<usize> = obj.functions.keys().map(|&(section, _)| section).collect();
    obj.relocate_maps(with_fds.into_iter(), &text_sections)
        .map_err(|source| PrepareError::Relocation {
            what: "map references",
            source,
        })?;
    obj.relocate_calls(&text_sections)
        .map_err(|source| PrepareError::Relocation {
            what: "function calls",
            source,
        })?;
    obj.sanitize_functions(aya::features());
    Ok(())
}
