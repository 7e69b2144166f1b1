//! A web server in an Ilwaco guest serving one static document (seed 004's Denali experiments),
//! and the clients that load it: an open-loop Poisson stream per VM, or closed-loop clients that
//! pick a VM by Zipf popularity for each request, as Denali's modified httperf spread its requests.
//!
//! Each request is a connection: its request packet takes an mbuf when it arrives and holds it
//! until the server has answered; the answer is copied into clusters, each sent behind an mbuf
//! header, and the socket keeps them until the client acknowledges them about a round trip later.

use crate::guest::ilwaco::mbuf::MCLBYTES;
use crate::guest::ilwaco::mbuf::PoolKind;

/// TCP's maximum segment over 1,500-byte Ethernet (Denali's testbed MTU, OSDI 2002 section 4):
/// 1,500 - 20 (IP) - 20 (TCP).
pub const MSS: u32 = 1460;

/// Where requests come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// Each VM receives requests as a Poisson stream of this many per second.
    Open {
        /// Requests per second per VM.
        rate: f64,
    },
    /// This many clients in all, each sending a request, waiting for the answer, thinking, and
    /// again; each request goes to a VM drawn by Zipf popularity over every web-server VM.
    Closed {
        /// Clients in all.
        clients: u32,
        /// Think time between an answer and the next request, ns.
        think_ns: u64,
        /// Zipf exponent of VM popularity (0: uniform).
        zipf: f64,
    },
}

/// Which end of a connection closes first, and so holds it in TIME_WAIT for twice the maximum
/// segment lifetime (RFC 793) while the other end's state goes at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closer {
    /// The client closes once it has the answer (httperf(1): "send a request for the root
    /// document, receive the reply, close the connection"); the server's side ends one round
    /// trip later, in LAST_ACK.
    Client,
    /// The server closes after writing the answer (an HTTP/1.0 server without keep-alive): its
    /// tcpcb and header template stay for 2 MSL.
    Server,
}

scenario_names!(Closer {
    Client => "client",
    Server => "server",
});

/// The `web-server` workload as a scenario configures it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WebServer {
    /// The guest's mbuf allocator.
    pub pool: PoolKind,
    /// Where requests come from.
    pub load: Load,
    /// Bytes of the document every request fetches.
    pub document: u64,
    /// CPU time to serve one request, ns.
    pub cpu_ns: u64,
    /// Mean time from sending an answer to the client's acknowledgement, ns.
    pub rtt_ns: u64,
    /// Pages of the server's code and data one request runs through.
    pub path_pages: u32,
    /// The end that closes first.
    pub closer: Closer,
    /// TCP's maximum segment lifetime, ns: a connection the server closed first keeps its
    /// state for twice this.
    pub msl_ns: u64,
    /// mbufs in the guest's pool.
    pub mbufs: u32,
    /// Clusters in the guest's pool.
    pub clusters: u32,
}

impl WebServer {
    /// Clusters one answer fills.
    pub fn clusters_per_request(&self) -> u32 {
        (self.document.div_ceil(MCLBYTES as u64) as u32).max(1)
    }

    /// mbufs one answer takes: a header for each segment sent and one heading each cluster in
    /// the socket buffer.
    pub fn mbufs_per_answer(&self) -> u32 {
        self.document.div_ceil(MSS as u64).max(1) as u32 + self.clusters_per_request()
    }

    /// A list-pool server of one page of code under a trickle of requests, for tests: a
    /// `document`-byte answer, `mbufs` and `clusters` in its pools, a 1 ms round trip.
    #[cfg(test)]
    pub(crate) fn small(document: u64, mbufs: u32, clusters: u32) -> Self {
        WebServer {
            pool: PoolKind::List,
            load: Load::Open { rate: 1.0 },
            document,
            cpu_ns: 1_000,
            rtt_ns: 1_000_000,
            path_pages: 1,
            closer: Closer::Client,
            msl_ns: 0,
            mbufs,
            clusters,
        }
    }
}

/// Cumulative popularity of `n` VMs under Zipf exponent `s`: VM `i` is chosen with probability
/// proportional to 1/(i+1)^s.
pub fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (0..n)
        .map(|i| {
            acc += 1.0 / ((i + 1) as f64).powf(s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

/// The VM a uniform draw `u` in [0, 1) picks under `cdf`.
pub fn zipf_pick(cdf: &[f64], u: f64) -> usize {
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_the_first_and_uniform_does_not() {
        let z = zipf_cdf(1000, 1.0);
        assert!((z[999] - 1.0).abs() < 1e-12);
        // Under s = 1 the first VM gets 1/H(1000) = 13.4 % of requests.
        assert!((z[0] - 0.1336).abs() < 0.001, "{}", z[0]);
        assert_eq!(zipf_pick(&z, 0.0), 0);
        assert_eq!(zipf_pick(&z, 0.9999999), 999);
        let u = zipf_cdf(4, 0.0);
        assert_eq!(zipf_pick(&u, 0.3), 1);
    }

    #[test]
    fn denali_document_takes_two_clusters() {
        let w = WebServer::small(2258, 1, 1);
        assert_eq!(w.clusters_per_request(), 2);
        assert_eq!(w.mbufs_per_answer(), 4);
    }
}
