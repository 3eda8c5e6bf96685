//! The sealed export file (format in `docs/tenant-export.md`): one plaintext header line, then
//! the body as AES-256-GCM frames in the STREAM construction, so a file of any size is
//! written and read in 64 KiB pieces and never held whole in memory.
//!
//! - The file key is HKDF-SHA256 of the transfer key (32 random bytes, shared out of band
//!   with the destination) and the header's random salt.
//! - Frame `i`'s nonce is the header's 7-byte prefix, `i` as 4 bytes big-endian, and one
//!   byte that is 1 on the last frame only; every frame's associated data is the header line.
//!   So a changed byte, a reordered, dropped or repeated frame, a cut-off tail, or an edited
//!   header each fails to open.

use std::{
    fs::File,
    io::{BufRead, BufReader, BufWriter, Read, Write},
    path::Path,
};

use aes_gcm::{
    Aes256Gcm, KeyInit,
    aead::{Aead, Nonce, Payload},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// The format name every header carries.
pub const FORMAT_NAME: &str = "gatehouse-tenant-export";
/// The format version this build writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
const CIPHER: &str = "AES-256-GCM-STREAM";
const KDF: &str = "HKDF-SHA256";
const KDF_INFO: &[u8] = b"gatehouse tenant export v1";
/// Plaintext bytes per frame.
pub const FRAME_BYTES: usize = 64 * 1024;
const TAG_BYTES: usize = 16;
const PREFIX_BYTES: usize = 7;
const MAX_HEADER_BYTES: u64 = 4096;

/// The transfer key: 32 random bytes, written base64url to a file of mode 0600.
pub struct TransferKey(Zeroizing<[u8; 32]>);

impl TransferKey {
    pub fn generate() -> TransferKey {
        let mut key = Zeroizing::new([0u8; 32]);
        rand::rng().fill_bytes(key.as_mut());
        TransferKey(key)
    }

    pub fn encode(&self) -> Zeroizing<String> {
        Zeroizing::new(URL_SAFE_NO_PAD.encode(self.0.as_ref()))
    }

    /// Reads a key file (`export_key_invalid` unless it holds exactly 32 bytes, base64url).
    pub fn read(path: &Path) -> Result<TransferKey> {
        let invalid = || Error::invalid("export_key_invalid", Some("key_file"), "the key file must hold one transfer key");
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|_| invalid())?);
        let bytes = Zeroizing::new(URL_SAFE_NO_PAD.decode(text.trim().trim_end_matches('=')).map_err(|_| invalid())?);
        let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| invalid())?;
        Ok(TransferKey(Zeroizing::new(key)))
    }

    fn cipher(&self, salt: &[u8]) -> Aes256Gcm {
        let mut okm = Zeroizing::new([0u8; 32]);
        // 32 bytes is far below HKDF-SHA256's output limit, so expand cannot fail.
        let _ = hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), self.0.as_ref()).expand(KDF_INFO, okm.as_mut());
        Aes256Gcm::new_from_slice(okm.as_ref()).unwrap_or_else(|_| unreachable!("a 32-byte key"))
    }
}

/// The plaintext first line of a file.
#[derive(Debug, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub cipher: String,
    pub kdf: String,
    pub salt: String,
    pub nonce_prefix: String,
    pub frame_bytes: usize,
}

fn nonce(prefix: &[u8], counter: u32, last: bool) -> Nonce<Aes256Gcm> {
    let mut n = [0u8; 12];
    n[..PREFIX_BYTES].copy_from_slice(prefix);
    n[PREFIX_BYTES..11].copy_from_slice(&counter.to_be_bytes());
    n[11] = u8::from(last);
    Nonce::<Aes256Gcm>::from(n)
}

/// Writes the body as sealed frames; [`Sealer::finish`] seals the last one (a file without it
/// is refused as truncated).
pub struct Sealer {
    out: BufWriter<File>,
    cipher: Aes256Gcm,
    prefix: Vec<u8>,
    aad: Vec<u8>,
    counter: u32,
    pending: Zeroizing<Vec<u8>>,
}

impl Sealer {
    pub fn new(file: File, key: &TransferKey) -> Result<Sealer> {
        let mut salt = [0u8; 32];
        let mut prefix = [0u8; PREFIX_BYTES];
        rand::rng().fill_bytes(&mut salt);
        rand::rng().fill_bytes(&mut prefix);
        let header = Header {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            cipher: CIPHER.into(),
            kdf: KDF.into(),
            salt: URL_SAFE_NO_PAD.encode(salt),
            nonce_prefix: URL_SAFE_NO_PAD.encode(prefix),
            frame_bytes: FRAME_BYTES,
        };
        let mut aad = serde_json::to_vec(&header).map_err(anyhow::Error::from)?;
        aad.push(b'\n');
        let mut out = BufWriter::new(file);
        out.write_all(&aad).map_err(anyhow::Error::from)?;
        Ok(Sealer {
            out,
            cipher: key.cipher(&salt),
            prefix: prefix.to_vec(),
            aad,
            counter: 0,
            pending: Zeroizing::new(Vec::with_capacity(2 * FRAME_BYTES)),
        })
    }

    /// Appends one line (a newline is added).
    pub fn line(&mut self, bytes: &[u8]) -> Result<()> {
        self.pending.extend_from_slice(bytes);
        self.pending.push(b'\n');
        while self.pending.len() > FRAME_BYTES {
            let rest = Zeroizing::new(self.pending.split_off(FRAME_BYTES));
            let frame = std::mem::replace(&mut self.pending, rest);
            self.frame(&frame, false)?;
        }
        Ok(())
    }

    fn frame(&mut self, plaintext: &[u8], last: bool) -> Result<()> {
        if self.counter == u32::MAX {
            return Err(anyhow::anyhow!("the export is larger than the format allows").into());
        }
        let n = nonce(&self.prefix, self.counter, last);
        let sealed = self
            .cipher
            .encrypt(&n, Payload { msg: plaintext, aad: &self.aad })
            .map_err(|_| anyhow::anyhow!("sealing a frame failed"))?;
        self.out.write_all(&(sealed.len() as u32).to_be_bytes()).map_err(anyhow::Error::from)?;
        self.out.write_all(&sealed).map_err(anyhow::Error::from)?;
        self.counter += 1;
        Ok(())
    }

    /// Seals what is left as the last frame and flushes the file to disk.
    pub fn finish(mut self) -> Result<()> {
        let rest = std::mem::take(&mut *self.pending);
        self.frame(&rest, true)?;
        let file = self.out.into_inner().map_err(|e| anyhow::Error::from(e.into_error()))?;
        file.sync_all().map_err(anyhow::Error::from)?;
        Ok(())
    }
}

fn unreadable() -> Error {
    Error::Conflict {
        code: "export_unreadable",
        message: "the export does not open with this transfer key: a wrong key, or the file was changed".into(),
    }
}

/// Reads the header, refusing another format or a newer version before anything is decrypted.
pub fn read_header(reader: &mut BufReader<File>) -> Result<(Header, Vec<u8>)> {
    let not_ours = || Error::invalid("export_format_unsupported", Some("from"), "the file is not a Gatehouse tenant export");
    let mut line = Vec::new();
    reader.by_ref().take(MAX_HEADER_BYTES).read_until(b'\n', &mut line).map_err(|_| not_ours())?;
    if line.last() != Some(&b'\n') {
        return Err(not_ours());
    }
    let header: Header = serde_json::from_slice(&line).map_err(|_| not_ours())?;
    if header.format != FORMAT_NAME {
        return Err(not_ours());
    }
    if header.version > FORMAT_VERSION {
        return Err(Error::invalid(
            "export_format_unsupported",
            Some("from"),
            format!("the export is format version {}; this build reads up to {FORMAT_VERSION}", header.version),
        ));
    }
    if header.cipher != CIPHER || header.kdf != KDF || header.frame_bytes != FRAME_BYTES {
        return Err(not_ours());
    }
    Ok((header, line))
}

/// Opens the body frame by frame and hands it out line by line.
pub struct Opener {
    input: BufReader<File>,
    cipher: Aes256Gcm,
    prefix: Vec<u8>,
    aad: Vec<u8>,
    counter: u32,
    plain: Zeroizing<Vec<u8>>,
    at: usize,
    finished: bool,
}

impl Opener {
    /// Reads the file at `path` with `key` (refusals: see [`read_header`] and [`unreadable`]).
    pub fn open(path: &Path, key: &TransferKey) -> Result<Opener> {
        let file = File::open(path)
            .map_err(|e| Error::invalid("export_missing", Some("from"), format!("cannot read {}: {e}", path.display())))?;
        let mut input = BufReader::with_capacity(FRAME_BYTES + 64, file);
        let (header, aad) = read_header(&mut input)?;
        let salt = URL_SAFE_NO_PAD.decode(&header.salt).map_err(|_| unreadable())?;
        let prefix = URL_SAFE_NO_PAD.decode(&header.nonce_prefix).map_err(|_| unreadable())?;
        if prefix.len() != PREFIX_BYTES {
            return Err(unreadable());
        }
        Ok(Opener {
            input,
            cipher: key.cipher(&salt),
            prefix,
            aad,
            counter: 0,
            plain: Zeroizing::new(Vec::new()),
            at: 0,
            finished: false,
        })
    }

    /// Opens the next frame into the buffer; false once the last frame was read.
    fn next_frame(&mut self) -> Result<bool> {
        if self.finished {
            return Ok(false);
        }
        let truncated = || Error::Conflict { code: "export_truncated", message: "the export ends before its last frame".into() };
        let mut len = [0u8; 4];
        self.input.read_exact(&mut len).map_err(|_| truncated())?;
        let len = u32::from_be_bytes(len) as usize;
        if !(TAG_BYTES..=FRAME_BYTES + TAG_BYTES).contains(&len) {
            return Err(unreadable());
        }
        let mut sealed = vec![0u8; len];
        self.input.read_exact(&mut sealed).map_err(|_| truncated())?;
        // The last frame is the one the file ends after; it must say so in its nonce.
        let last = self.input.fill_buf().map_err(anyhow::Error::from)?.is_empty();
        let n = nonce(&self.prefix, self.counter, last);
        let plain = self.cipher.decrypt(&n, Payload { msg: &sealed, aad: &self.aad }).map_err(|_| {
            if last
                && self
                    .cipher
                    .decrypt(&nonce(&self.prefix, self.counter, false), Payload { msg: &sealed, aad: &self.aad })
                    .is_ok()
            {
                truncated()
            } else {
                unreadable()
            }
        })?;
        self.counter += 1;
        self.finished = last;
        self.plain.drain(..self.at);
        self.at = 0;
        self.plain.extend_from_slice(&plain);
        Ok(true)
    }

    /// The next line of the body (without its newline), or `None` at its authenticated end.
    pub fn line(&mut self) -> Result<Option<Zeroizing<Vec<u8>>>> {
        loop {
            if let Some(end) = self.plain[self.at..].iter().position(|&b| b == b'\n') {
                let line = Zeroizing::new(self.plain[self.at..self.at + end].to_vec());
                self.at += end + 1;
                return Ok(Some(line));
            }
            if !self.next_frame()? {
                return if self.at == self.plain.len() { Ok(None) } else { Err(unreadable()) };
            }
        }
    }
}
