//! Seeded synthetic vectors for tests and benchmarks: a clustered set that looks like sentence
//! embeddings (the main workload) and the uniform one that is hardest for HNSW.
//!
//! The generator is fully specified here so that figures can be reproduced from the seed alone:
//!
//! - Random numbers come from SplitMix64 (Steele, Lea and Flood's 64-bit mixer) seeded with the
//!   caller's seed; standard normal values come from the Box–Muller transform on pairs of
//!   uniforms in (0, 1].
//! - **Uniform**: each vector is `dim` independent standard normals, L2-normalised, i.e. a
//!   uniformly random point on the unit sphere. Neighbours are barely closer than strangers.
//! - **Clustered**: `centres` centre vectors are drawn as in *uniform* (from the generator's own
//!   seed). A point picks a centre uniformly at random and adds independent normal noise of
//!   standard deviation `noise` to every coordinate, then is L2-normalised. With 384 dimensions
//!   and `noise = 0.07` a point's cosine to its centre is about 0.6 and two points of one
//!   cluster meet at about 0.35, while points of different clusters stay near 0, which is
//!   roughly how MiniLM places sentences on one subject against sentences on others.
//!
//! Base vectors and queries come from [`Generator::sample`] with different seeds, so queries are
//! drawn from the same clusters but are never copies of base vectors.

/// The default centre count of [`Generator::clustered`] used by the tests and the benchmark.
pub const DEFAULT_CENTRES: usize = 1_000;

/// The default per-coordinate noise of [`Generator::clustered`] used by the tests and the benchmark.
pub const DEFAULT_NOISE: f32 = 0.07;

/// SplitMix64: a tiny, well-mixed, seedable generator whose output never changes with a crate
/// version.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in (0, 1].
    fn unit_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal value (Box–Muller, one of the pair used).
    pub fn normal(&mut self) -> f32 {
        let r = (-2.0 * self.unit_open().ln()).sqrt();
        let theta = std::f64::consts::TAU * self.unit_open();
        (r * theta.cos()) as f32
    }

    /// A uniform index in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// A source of unit vectors, uniform or clustered (see the module documentation).
#[derive(Clone, Debug)]
pub struct Generator {
    dim: usize,
    /// `centres × dim` values; empty for the uniform generator.
    centres: Vec<f32>,
    noise: f32,
}

impl Generator {
    /// Uniformly random unit vectors.
    pub fn uniform(dim: usize) -> Self {
        Self {
            dim,
            centres: Vec::new(),
            noise: 0.0,
        }
    }

    /// Points scattered around `centres` random centres drawn with `seed`.
    pub fn clustered(dim: usize, centres: usize, noise: f32, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut data = Vec::with_capacity(centres * dim);
        for _ in 0..centres {
            let start = data.len();
            data.extend((0..dim).map(|_| rng.normal()));
            normalise(&mut data[start..]);
        }
        Self {
            dim,
            centres: data,
            noise,
        }
    }

    /// The dimension of the vectors made.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// `n` unit vectors drawn with `seed`, row after row (`n × dim` values).
    pub fn sample(&self, n: usize, seed: u64) -> Vec<f32> {
        let dim = self.dim;
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::with_capacity(n * dim);
        let centres = self.centres.len() / dim.max(1);
        for _ in 0..n {
            let start = out.len();
            if centres == 0 {
                out.extend((0..dim).map(|_| rng.normal()));
            } else {
                let c = rng.below(centres);
                let centre = &self.centres[c * dim..(c + 1) * dim];
                out.extend(centre.iter().map(|x| x + self.noise * rng.normal()));
            }
            normalise(&mut out[start..]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_unit_length_and_reproducible() {
        let g = Generator::clustered(384, 10, DEFAULT_NOISE, 7);
        let a = g.sample(20, 1);
        assert_eq!(a, g.sample(20, 1));
        assert_ne!(a, g.sample(20, 2));
        for row in a.chunks_exact(384) {
            let n: f32 = row.iter().map(|x| x * x).sum();
            assert!((n - 1.0).abs() < 1e-4);
        }
    }

    #[test]
    fn clustered_points_sit_near_their_centre() {
        let g = Generator::clustered(384, 1, DEFAULT_NOISE, 3);
        let pts = g.sample(20, 9);
        let rows: Vec<&[f32]> = pts.chunks_exact(384).collect();
        let mut sum = 0.0;
        for pair in rows.windows(2) {
            sum += pair[0].iter().zip(pair[1]).map(|(a, b)| a * b).sum::<f32>();
        }
        let mean = sum / 19.0;
        assert!(
            (0.25..0.45).contains(&mean),
            "mean within-cluster cosine {mean}"
        );
    }
}
