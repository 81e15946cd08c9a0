use super::*;
use clap::Parser;

#[derive(Parser)]
struct T {
    #[command(flatten)]
    a: Args,
}

fn sweep(args: &[&str]) -> Args {
    let mut v = vec!["t"];
    v.extend_from_slice(args);
    T::try_parse_from(v).unwrap().a
}

fn base(words: &[&str], option: Option<&str>) -> SweepBase {
    let words: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    SweepBase {
        base: Base::parse(&words).unwrap(),
        words,
        option: option.map(str::to_string),
    }
}

fn smtp(b: Base) -> super::super::smtp::Args {
    match b {
        Base::Smtp(a) => a,
        _ => panic!("not smtp"),
    }
}

fn xmpp(b: Base) -> super::super::xmpp::Args {
    match b {
        Base::Xmpp(a) => a,
        _ => panic!("not xmpp"),
    }
}

#[test]
fn each_parameter_sets_its_option() {
    let plain = base(&["127.0.0.1:2525"], None);
    let open = base(&["x", "--rate", "5/s"], None);
    let closed = base(&["x", "--users", "3"], None);
    let s = sweep(&["--users", "1..3,10..30/10", "--", "x"]);
    let (p, name, v) = s.param().unwrap();
    assert_eq!((p, name.as_str()), (Param::Users, "users"));
    assert_eq!(v, vec![1, 2, 3, 10, 20, 30]);
    let a = smtp(step_args(&plain, p, 20, None).unwrap());
    assert_eq!(a.workload.users, Some(20));
    assert!(a.workload.rate.is_none() && a.monitor.monitor);
    // Sweeping users of an open workload (or a rate of a closed one) is refused.
    assert!(step_args(&open, p, 20, None).is_err());
    assert!(step_args(&closed, Param::Rate, 20, None).is_err());
    let a = smtp(step_args(&plain, p, 20, Some(100)).unwrap());
    assert_eq!((a.workload.count, a.workload.duration), (Some(2000), None));

    let s = sweep(&["--size", "1k, 10k", "--", "x"]);
    let (p, _, v) = s.param().unwrap();
    assert_eq!(v, vec![1024, 10240]);
    assert_eq!(
        smtp(step_args(&plain, p, 10240, None).unwrap()).size,
        "10240"
    );

    let s = sweep(&["--rate", "100,200", "--", "x"]);
    let (p, _, _) = s.param().unwrap();
    let s = sweep(&["--rate", "100/s, 200/s,300..500/100", "--", "x"]);
    assert_eq!(s.param().unwrap().2, vec![100, 200, 300, 400, 500]);
    assert_eq!(
        smtp(step_args(&plain, p, 200, None).unwrap())
            .workload
            .rate
            .as_deref(),
        Some("200/s")
    );
    assert!(step_args(&plain, p, 0, None).is_err());

    let s = sweep(&["--messages-per-connection", "1,10", "--", "x"]);
    let (p, name, _) = s.param().unwrap();
    assert_eq!(name, "messages_per_connection");
    assert_eq!(
        smtp(step_args(&plain, p, 10, None).unwrap()).messages_per_connection,
        "10"
    );

    let s = sweep(&[
        "--values",
        "1,2",
        "--param-name",
        "process limit",
        "--before-step",
        "true",
        "--",
        "x",
    ]);
    let (p, name, _) = s.param().unwrap();
    assert_eq!((p, name.as_str()), (Param::Value, "process_limit"));
    // --values alone sets nothing: refused.
    assert!(sweep(&["--values", "1,2", "--", "x"]).param().is_err());
}

#[test]
fn param_sets_any_option_of_smtp_or_xmpp() {
    let s = sweep(&["--param", "max-in-flight", "--values", "4,8", "--", "x"]);
    let (p, name, _) = s.param().unwrap();
    assert_eq!((p, name.as_str()), (Param::Value, "max-in-flight"));
    let b = base(
        &["x", "--rate", "5/s", "--max-in-flight=2"],
        Some("max-in-flight"),
    );
    let a = smtp(step_args(&b, p, 8, None).unwrap());
    assert_eq!(a.workload.max_in_flight, 8);
    assert_eq!(a.workload.rate.as_deref(), Some("5/s"));

    let words = [
        "xmpp",
        "127.0.0.1:5222",
        "--user-pattern",
        "u{0..9}@example.test",
        "--users",
        "10",
        "--traffic",
        "multicast",
        "--addresses",
        "1",
        "--rate",
        "10/s",
    ];
    let b = base(&words, Some("addresses"));
    let a = xmpp(step_args(&b, Param::Value, 5, None).unwrap());
    assert_eq!((a.addresses.as_str(), a.monitor.monitor), ("5", true));
    // XMPP's sessions stay with a rate sweep, and a users sweep keeps the rate; the
    // swept option itself after -- is refused, not silently replaced.
    let b = base(&words, None);
    assert!(step_args(&b, Param::Rate, 20, None).is_err());
    assert!(step_args(&b, Param::Users, 5, None).is_err());
    let b = base(&words[..10], None);
    let a = xmpp(step_args(&b, Param::Rate, 20, None).unwrap());
    assert_eq!(
        (a.workload.rate.as_deref(), a.workload.users),
        (Some("20/s"), Some(10))
    );
    let unrated: Vec<&str> = words[..4].iter().chain(&words[6..]).copied().collect();
    let b = base(&unrated, None);
    let a = xmpp(step_args(&b, Param::Users, 5, None).unwrap());
    assert_eq!(
        (a.workload.rate.as_deref(), a.workload.users),
        (Some("10/s"), Some(5))
    );
    assert!(step_args(&b, Param::MessagesPerConnection, 5, None).is_err());
    // A value the command refuses is the command's own error.
    let b = base(&words, Some("no-such-option"));
    assert!(step_args(&b, Param::Value, 5, None).is_err());
}
