//! The subject alternative names of a certificate, as client_allowed_sans
//! compares them: DNS names, email addresses, IP addresses (in their usual
//! text form) and URIs. A small DER walk: the certificate has already been
//! parsed (and, with a client CA, verified) by webpki before we look, and
//! webpki's API gives DNS names and URIs only.

use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::net::Ipv6Addr;

/// One DER element: (tag, content, rest of the input).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed value's content.
fn elements(mut content: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, value, rest) = tlv(content)?;
        content = rest;
        Some((tag, value))
    })
}

const SEQUENCE: u8 = 0x30;
const EXTENSIONS: u8 = 0xa3; // [3] EXPLICIT in TBSCertificate
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
/// 2.5.29.17, subjectAltName.
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// The SANs of a DER certificate; None when it cannot be read.
pub(crate) fn names(cert: &[u8]) -> Option<Vec<String>> {
    let (tag, cert, _) = tlv(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = tlv(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut out = Vec::new();
    let Some((_, exts)) = elements(tbs).find(|(t, _)| *t == EXTENSIONS) else {
        return Some(out);
    };
    let (tag, exts, _) = tlv(exts)?;
    if tag != SEQUENCE {
        return None;
    }
    for (tag, ext) in elements(exts) {
        if tag != SEQUENCE {
            return None;
        }
        let mut parts = elements(ext);
        let (OID, oid) = parts.next()? else {
            return None;
        };
        if oid != SAN_OID {
            continue;
        }
        // The critical flag is optional; the value is the last element.
        let (OCTET_STRING, value) = parts.last()? else {
            return None;
        };
        let (SEQUENCE, general_names, _) = tlv(value)? else {
            return None;
        };
        for (tag, v) in elements(general_names) {
            match tag {
                // rfc822Name [1], dNSName [2], uniformResourceIdentifier [6]
                0x81 | 0x82 | 0x86 => out.push(String::from_utf8_lossy(v).into_owned()),
                // iPAddress [7]
                0x87 => match v.len() {
                    4 => out.push(Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?).to_string()),
                    16 => {
                        let ip = Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?);
                        // Go prints a v4-mapped address as plain v4.
                        let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
                        out.push(ip.to_string())
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    Some(out)
}
