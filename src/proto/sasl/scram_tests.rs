//! Known answers from RFC 5802 §5 and RFC 7677 §3, both sides, and the refusals.

use super::*;

struct Vector {
    hash: ScramHash,
    client_nonce: &'static str,
    server_nonce: &'static str,
    salt_b64: &'static str,
    client_first: &'static str,
    server_first: &'static str,
    client_final: &'static str,
    server_final: &'static str,
}

const RFC5802: Vector = Vector {
    hash: ScramHash::Sha1,
    client_nonce: "fyko+d2lbbFgONRv9qkxdawL",
    server_nonce: "3rfcNHYJY1ZVvWVs7j",
    salt_b64: "QSXCR+Q6sek8bf92",
    client_first: "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    server_first: "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    client_final:
        "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    server_final: "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
};

const RFC7677: Vector = Vector {
    hash: ScramHash::Sha256,
    client_nonce: "rOprNGfwEbeRWgbNEkqO",
    server_nonce: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    salt_b64: "W22ZaJ0SNY7soEsUEjb6gQ==",
    client_first: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    server_first: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                   s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    client_final: "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                   p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    server_final: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
};

fn client(v: &Vector) -> ScramClient {
    ScramClient::new(v.hash, "user", "pencil", v.client_nonce)
}

fn server(v: &Vector) -> ScramServer {
    let salt = STANDARD.decode(v.salt_b64).unwrap();
    ScramServer::new(v.hash, "pencil", &salt, 4096, v.server_nonce)
}

fn client_side(v: &Vector) {
    let mut c = client(v);
    assert_eq!(c.client_first(), v.client_first);
    assert_eq!(c.client_final(v.server_first).unwrap(), v.client_final);
    c.verify_server_final(v.server_final).unwrap();
}

fn server_side(v: &Vector) {
    let mut s = server(v);
    let (user, first) = s.server_first(v.client_first).unwrap();
    assert_eq!(user, "user");
    assert_eq!(first, v.server_first);
    assert_eq!(s.server_final(v.client_final).unwrap(), v.server_final);
}

#[test]
fn rfc5802_sha1_both_sides() {
    client_side(&RFC5802);
    server_side(&RFC5802);
}

#[test]
fn rfc7677_sha256_both_sides() {
    client_side(&RFC7677);
    server_side(&RFC7677);
}

#[test]
fn mechanism_names() {
    for h in [ScramHash::Sha1, ScramHash::Sha256] {
        assert_eq!(ScramHash::from_mechanism(h.mechanism()), Some(h));
    }
    assert_eq!(
        ScramHash::from_mechanism("scram-sha-256"),
        Some(ScramHash::Sha256)
    );
    assert_eq!(ScramHash::from_mechanism("SCRAM-SHA-1-PLUS"), None);
    assert_eq!(ScramHash::from_mechanism("SCRAM-SHA-512"), None);
}

#[test]
fn wrong_password_is_bad_proof() {
    let v = &RFC7677;
    let mut c = ScramClient::new(v.hash, "user", "pen", v.client_nonce);
    let mut s = server(v);
    let (_, first) = s.server_first(&c.client_first()).unwrap();
    let fin = c.client_final(&first).unwrap();
    assert_eq!(s.server_final(&fin), Err(ScramError::BadProof));
    // A second try on the same exchange is refused too.
    assert_eq!(s.server_final(&fin), Err(ScramError::OutOfOrder));
}

#[test]
fn client_checks_the_server() {
    let v = &RFC5802;
    let mut c = client(v);
    let bad_nonce = v.server_first.replace("r=fyko", "r=fyk0");
    assert_eq!(c.client_final(&bad_nonce), Err(ScramError::Nonce));
    let same_nonce = format!("r={},s=QSXCR+Q6sek8bf92,i=4096", v.client_nonce);
    assert_eq!(c.client_final(&same_nonce), Err(ScramError::Nonce));
    for (i, n) in [
        ("0", 0),
        ("1000001", 1_000_001),
        ("99999999999999999999", u64::MAX),
    ] {
        let msg = v.server_first.replace("i=4096", &format!("i={i}"));
        assert_eq!(c.client_final(&msg), Err(ScramError::Iterations(n)));
    }
    let msg = v.server_first.replace("i=4096", "i=-1");
    assert!(matches!(
        c.client_final(&msg),
        Err(ScramError::Malformed(_))
    ));
    let msg = v.server_first.replace("s=QSXCR", "s=!!");
    assert_eq!(c.client_final(&msg), Err(ScramError::Base64));
    assert_eq!(
        c.client_final(&format!("m=x,{}", v.server_first)),
        Err(ScramError::Unsupported("mandatory extension"))
    );
    assert!(c.client_final("garbage").is_err());
    assert_eq!(
        c.verify_server_final(v.server_final),
        Err(ScramError::OutOfOrder)
    );
    c.client_final(v.server_first).unwrap();
    assert_eq!(
        c.verify_server_final("v=rmF9pqV8S7suAoZWja4dJRkFsKA="),
        Err(ScramError::BadServerSignature)
    );
    assert_eq!(
        c.verify_server_final("e=invalid-proof"),
        Err(ScramError::Server("invalid-proof".into()))
    );
    assert_eq!(c.verify_server_final("v=%%"), Err(ScramError::Base64));
}

#[test]
fn server_refuses_channel_binding_and_bad_messages() {
    let v = &RFC5802;
    let first = |m: &str| server(v).server_first(m).map(|(u, _)| u);
    assert_eq!(
        first("p=tls-unique,,n=user,r=abc"),
        Err(ScramError::Unsupported("channel binding"))
    );
    assert_eq!(
        first("n,,m=ext,n=user,r=abc"),
        Err(ScramError::Unsupported("mandatory extension"))
    );
    assert!(first("n,,n=user").is_err());
    assert!(first("n,,n=us=er,r=abc").is_err());
    assert!(first("x,,n=user,r=abc").is_err());
    assert!(first("").is_err());
    assert_eq!(first("y,a=admin,n=user,r=abc").unwrap(), "user");

    let mut s = server(v);
    assert_eq!(s.server_final(v.client_final), Err(ScramError::OutOfOrder));
    let mut s = server(v);
    s.server_first(v.client_first).unwrap();
    let tampered = v.client_final.replace("c=biws", "c=eSws");
    assert!(matches!(
        s.server_final(&tampered),
        Err(ScramError::Malformed(_))
    ));
    let mut s = server(v);
    s.server_first(v.client_first).unwrap();
    let short = v.client_final.replace("p=v0X8", "p=");
    assert!(s.server_final(&short).is_err());
}

#[test]
fn user_names_are_saslnames() {
    let mut c = ScramClient::new(ScramHash::Sha256, "a,b=c", "pw", "n0nce");
    assert_eq!(c.client_first(), "n,,n=a=2Cb=3Dc,r=n0nce");
    assert_eq!(client_first_user(&c.client_first()).unwrap(), "a,b=c");
    let mut s = ScramServer::new(ScramHash::Sha256, "pw", b"salt", 16, "srv");
    let (user, first) = s.server_first(&c.client_first()).unwrap();
    assert_eq!(user, "a,b=c");
    let fin = c.client_final(&first).unwrap();
    let v = s.server_final(&fin).unwrap();
    c.verify_server_final(&v).unwrap();
}

#[test]
fn nonces_are_cleaned() {
    let c = ScramClient::new(ScramHash::Sha1, "u", "p", "a b,c\u{e9}d");
    assert_eq!(c.client_first(), "n,,n=u,r=abcd");
}

#[test]
fn cached_salted_password_gives_the_same_answer() {
    let v = &RFC7677;
    let mut c = client(v);
    c.client_final(v.server_first).unwrap();
    let salted = c.salted().unwrap().clone();
    assert_eq!(salted.iterations, 4096);
    let mut again = client(v);
    again.use_cached(salted.clone());
    assert_eq!(again.client_final(v.server_first).unwrap(), v.client_final);
    // A cache for another salt is not used.
    let mut other = client(v);
    other.use_cached(SaltedPassword {
        salt: b"other".to_vec(),
        ..salted
    });
    assert_eq!(other.client_final(v.server_first).unwrap(), v.client_final);
    // The server can start from the same cache.
    let mut s = ScramServer::from_salted(c.salted().unwrap(), v.server_nonce);
    s.server_first(v.client_first).unwrap();
    assert_eq!(s.server_final(v.client_final).unwrap(), v.server_final);
}
