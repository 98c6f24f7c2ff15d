use std::panic;
#[test]
fn fuzz() {
    panic::set_hook(Box::new(|_| {}));
    let mut models: Vec<_> = walk(std::path::Path::new("testdata/models"));
    models.sort();
    let dir = tempfile::tempdir().unwrap();
    let mut s: u64 = 0x9876543;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut fails = Vec::new();
    let mut n = 0;
    for m in &models {
        let bytes = std::fs::read(m).unwrap();
        if bytes.len() > 300_000 {
            continue;
        }
        let ext = m.extension().unwrap().to_str().unwrap().to_string();
        for _ in 0..400 {
            let mut b = bytes.clone();
            let k = 1 + rnd() % 4;
            for _ in 0..k {
                let i = (rnd() as usize) % b.len();
                match rnd() % 3 {
                    0 => b[i] = rnd() as u8,
                    1 => b[i] ^= 1 << (rnd() % 8),
                    _ => {
                        let v = [0u8, 0xff, 0x7f, 0x80, 0x01][(rnd() % 5) as usize];
                        b[i] = v
                    }
                }
            }
            if rnd() % 10 == 0 {
                let l = (rnd() as usize) % b.len();
                b.truncate(l.max(1));
            }
            let p = dir.path().join(format!("f.{ext}"));
            std::fs::write(&p, &b).unwrap();
            n += 1;
            let r = panic::catch_unwind(|| {
                nnlint::mem_report(&p, &Default::default(), None).map(|r| {
                    nnlint::report::render_mem(
                        &r,
                        nnlint::report::MemFormat::Table,
                        Default::default(),
                    )
                })
            });
            if r.is_err() {
                let keep = dir.path().join(format!("crash{}.{ext}", fails.len()));
                std::fs::copy(&p, &keep).unwrap();
                std::fs::copy(&p, format!("/tmp/scratch/crash{}.{ext}", fails.len())).unwrap();
                fails.push(format!("{}", m.display()));
            }
        }
    }
    let _ = panic::take_hook();
    println!("runs {n}, panics {}: {:?}", fails.len(), fails);
}
fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p))
        } else if p
            .extension()
            .is_some_and(|e| e == "onnx" || e == "safetensors")
        {
            out.push(p)
        }
    }
    out
}
