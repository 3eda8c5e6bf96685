//! The changing downstream (`tests/peers/changing_server.py`, on the official Python SDK):
//! its tool definitions change between two catalog fetches, for the pinning tests.

use std::{path::PathBuf, time::Duration};

use serde_json::Value;

use super::listening;

pub struct Downstream {
    _child: tokio::process::Child,
    pub url: String,
    state: PathBuf,
}

impl Downstream {
    pub async fn start() -> Downstream {
        let state = std::env::temp_dir().join(format!("gatehouse-test-pins-{}.json", uuid::Uuid::new_v4().simple()));
        std::fs::write(&state, "{}").unwrap();
        let port = super::free_port();
        let child = super::python3()
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/changing_server.py"))
            .arg(port.to_string())
            .arg(&state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("run python3 (the changing downstream; scripts/test.sh installs its SDK)");
        assert!(listening(port, Duration::from_secs(30)).await, "the changing downstream did not start");
        Downstream { _child: child, url: format!("http://127.0.0.1:{port}/mcp"), state }
    }

    /// What the server lists from now on.
    pub fn set(&self, state: Value) {
        std::fs::write(&self.state, state.to_string()).unwrap();
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        std::fs::remove_file(&self.state).ok();
    }
}
