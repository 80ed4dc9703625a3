//! `Problem`: one attention call's shapes, layout and options, and its validation into the
//! values a kernel launch needs. FA4's conventions (DESIGN.md §6): q `(B, Sq, H, D)`, k/v
//! `(B, Sk, Hkv, D|Dv)`, out `(B, Sq, H, Dv)`, LSE `(B, H, Sq)` fp32; the last dim contiguous,
//! other strides free (multiples of 8 elements, i.e. 16-byte rows).

use super::error::Error;
use crate::params::FwdParams;
use crate::spec::{DType, Mask};

/// Element strides of a 4-d tensor `(batch, row, head, dim)`, dim stride 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strides {
    pub batch: i64,
    pub row: i64,
    pub head: i64,
}

impl Strides {
    /// Strides of a contiguous `(B, S, H, D)` tensor.
    /// (A stride past i64 saturates: validation then refuses the extent, never wraps it.)
    pub fn contiguous(seqlen: usize, heads: usize, dim: usize) -> Strides {
        let i = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
        Strides {
            batch: i(seqlen.saturating_mul(heads).saturating_mul(dim)),
            row: i(heads.saturating_mul(dim)),
            head: i(dim),
        }
    }

    /// One past the largest element offset a `(b, s, h, d)` tensor with these strides reaches
    /// (0 when any extent is 0).
    pub fn extent(&self, b: usize, s: usize, h: usize, d: usize) -> Option<usize> {
        if b == 0 || s == 0 || h == 0 || d == 0 {
            return Some(0);
        }
        let top = |x: usize| i64::try_from(x - 1).ok(); // x > 0 here
        let last = top(b)?
            .checked_mul(self.batch)?
            .checked_add(top(s)?.checked_mul(self.row)?)?
            .checked_add(top(h)?.checked_mul(self.head)?)?
            .checked_add(top(d)?)?;
        usize::try_from(last.checked_add(1)?).ok()
    }
}

/// A ragged batch (FA4's varlen): which per-sequence arrays the call passes. `batch` is then the
/// number of sequences and `seqlen_q` / `seqlen_k` the longest (FA4's `max_seqlen_q/k`, host
/// integers: they size the grid and drive selection, never read back from the device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Varlen {
    /// `cu_seqlens_q` (int32, B+1) is passed: q and out are packed `(total_q, H, D)`, the LSE
    /// `(H, total_q)`; only the row and head strides apply.
    pub total_q: Option<usize>,
    /// `cu_seqlens_k` (int32, B+1) is passed: k and v are packed `(total_k, Hkv, D)`.
    pub total_k: Option<usize>,
    /// `seqused_q` (int32, B) is passed: sequence b uses its first `seqused_q[b]` queries.
    pub seqused_q: bool,
    /// `seqused_k` (int32, B) is passed: sequence b uses its first `seqused_k[b]` keys.
    pub seqused_k: bool,
}

/// Paged K/V: k and v are `(num_pages, page_size, Hkv, D)` (their `batch` stride is the page
/// stride) and sequence b's key j lives in page `page_table[b, j / page_size]`. Without
/// `seqused_k` every sequence has `seqlen_k` keys (FA4: `pages_per_seq * page_size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paged {
    pub page_size: usize,
    pub num_pages: usize,
    /// Columns of the `(B, pages_per_seq)` int32 page table.
    pub pages_per_seq: usize,
    /// Elements between the page table's rows (default: `pages_per_seq`).
    pub page_table_stride: usize,
}

/// One forward call. Build with [`Problem::new`] (contiguous tensors, default scale, no mask)
/// and adjust the public fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub dtype: DType,
    pub batch: usize,
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    /// Defaults to `1 / sqrt(head_dim)`.
    pub softmax_scale: Option<f32>,
    pub causal: bool,
    /// `(left, right)` sliding window, bottom-right aligned; `None` is unbounded. Resolved
    /// exactly as FA4 does (see [`resolve_mask`]).
    pub window: (Option<i64>, Option<i64>),
    pub return_lse: bool,
    /// Fold the GQA group into M (`None`: fa4gen's default, see `select`).
    pub pack_gqa: Option<bool>,
    /// Force `(tile_m, tile_n)` instead of the family's tile table (FA4's `tile_mn`), for
    /// tuning; the library must hold that kernel.
    pub tile_mn: Option<(u32, u32)>,
    /// Launch the sm90 flagship in CTA pairs that share K/V blocks by TMA multicast
    /// (`KernelSpec::wgmma_pairs`). `None`: fa4gen's default (dense calls, unmasked or causal,
    /// of [`PAIRS_MIN_KEYS`](crate::select::PAIRS_MIN_KEYS)+ keys); `Some(true)`: wherever the
    /// kernel and an even number of Q blocks (causal: in whole, even runs) allow;
    /// `Some(false)`: never. For tuning.
    pub cta_pairs: Option<bool>,
    /// Run the sm90 flagship on its 64-row fill tile (`SpecClass::flagship_fill`, d 65-128)
    /// where its 128-row tiles would fill at most half the SMs, and at d <= 64 on its 128-row
    /// tile (`SpecClass::flagship_one_round`) where those fit one per SM. `None`: fa4gen's
    /// default (from [`FILL_MIN_KEYS`](crate::select::FILL_MIN_KEYS) keys, or an unsplit
    /// decode step, unsplit); `Some(true)`: at any length; `Some(false)`: never (the tile by
    /// shape). For tuning and tests.
    pub fill_tile: Option<bool>,
    /// Deal the last round of the sm90 flagship's persistent schedule as equal shares of K
    /// blocks, merging tiles split between two CTAs (`KernelSpec::wgmma_split_tail`). `None`:
    /// fa4gen's default (from [`SPLIT_TAIL_MIN_KEYS`](crate::select::SPLIT_TAIL_MIN_KEYS) keys
    /// at d >= 128, where whole tiles would leave 1%+ of the call idle,
    /// [`split_tail_pays`](crate::select::split_tail_pays)); `Some(true)`: wherever the kernel
    /// and the grid allow; `Some(false)`: never. For tuning and tests.
    pub split_tail: Option<bool>,
    /// Deal the sm90 flagship's causal runs Q block major (`Selection::m_major_runs`). `None`:
    /// fa4gen's default (from [`M_MAJOR_RUNS_MIN_KEYS`](crate::select::M_MAJOR_RUNS_MIN_KEYS)
    /// keys where one run of every (head, batch) fits in a round of the grid); `Some(true)`:
    /// wherever the kernel runs causal runs; `Some(false)`: never. For tuning and tests.
    pub m_major_runs: Option<bool>,
    /// Deal the sm90 flagship's causal runs by a host-planned order, each round's units
    /// heaviest first to the CTAs of least work (`Selection::lpt_rounds`). `None`: fa4gen's
    /// default (dense causal calls of more than one round from
    /// [`LPT_ROUNDS_MIN_KEYS`](crate::select::LPT_ROUNDS_MIN_KEYS) keys, where the runs are
    /// not dealt Q block major and the order evens the modelled work,
    /// `schedule::plan`); `Some(true)`: wherever the kernel runs dense causal runs (not with
    /// Q block major runs); `Some(false)`: never. For tuning and tests.
    pub lpt_rounds: Option<bool>,
    /// Deal a varlen batch's tiles on the sm90 flagship by the device's list of its real
    /// (sequence, Q block) units, heaviest first (`Selection::varlen_schedule`). `None`:
    /// fa4gen's default (varlen batches of more than one sequence whose query lengths may
    /// differ, instead of CTA pairs); `Some(true)`: every varlen batch of more than one
    /// sequence not forced into pairs; `Some(false)`: the padded schedule (every sequence as the
    /// longest). For tuning and tests.
    pub varlen_schedule: Option<bool>,
    /// Give each sequence of a varlen batch its own split count on the portable split kernel,
    /// dealt on the device by its K blocks, at most the call's count
    /// (`Selection::sequence_splits`). `None`: fa4gen's default (decode batches of
    /// per-sequence key lengths whose count is the heuristic's, `mixed_decode_batch`);
    /// `Some(true)`: every varlen call on the portable split kernel, the count (heuristic or
    /// `num_splits`) then the most a sequence takes; `Some(false)`: FA4's one count for every
    /// sequence. For tuning and tests.
    pub sequence_splits: Option<bool>,
    pub q_strides: Strides,
    pub k_strides: Strides,
    pub v_strides: Strides,
    pub o_strides: Strides,
    /// Soft-capping value c (`0`: off): scores become `c * tanh(scale * qk / c)`.
    pub softcap: f32,
    /// A per-head fp32 sink logit array (H) is passed (gpt-oss's learnable sinks).
    pub sinks: bool,
    /// FA4's `num_splits`: 1 runs unsplit, `> 1` splits K into exactly that many ranges
    /// (at most 256), `< 1` lets selection choose (FA4's heuristic, DESIGN.md §5).
    pub num_splits: i32,
    /// Ragged batch (`cu_seqlens_*`, `seqused_*`).
    pub varlen: Option<Varlen>,
    /// Paged K/V through a page table.
    pub paged: Option<Paged>,
}

impl Problem {
    /// A problem over contiguous tensors with FA4's defaults.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dtype: DType,
        batch: usize,
        seqlen_q: usize,
        seqlen_k: usize,
        heads: usize,
        heads_kv: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> Problem {
        Problem {
            dtype,
            batch,
            seqlen_q,
            seqlen_k,
            heads,
            heads_kv,
            head_dim,
            head_dim_v,
            softmax_scale: None,
            causal: false,
            window: (None, None),
            return_lse: false,
            pack_gqa: None,
            tile_mn: None,
            cta_pairs: None,
            fill_tile: None,
            split_tail: None,
            m_major_runs: None,
            lpt_rounds: None,
            varlen_schedule: None,
            sequence_splits: None,
            q_strides: Strides::contiguous(seqlen_q, heads, head_dim),
            k_strides: Strides::contiguous(seqlen_k, heads_kv, head_dim),
            v_strides: Strides::contiguous(seqlen_k, heads_kv, head_dim_v),
            o_strides: Strides::contiguous(seqlen_q, heads, head_dim_v),
            softcap: 0.0,
            sinks: false,
            num_splits: 1,
            varlen: None,
            paged: None,
        }
    }

    /// Rows of q/out across the batch: `total_q` when packed, else `B * Sq` (saturating: an
    /// unvalidated problem's product never wraps).
    pub fn total_q(&self) -> usize {
        self.varlen
            .and_then(|v| v.total_q)
            .unwrap_or(self.batch.saturating_mul(self.seqlen_q))
    }

    /// The (query) rows the kernels count in int, per head: a batched call's all (sequence b
    /// starts at row b * Sq), a packed one's (total_q) or its longest sequence's, whichever is
    /// more. A packed batch's B * max_seqlen_q is a padded grid, not rows.
    pub fn counted_rows(&self) -> usize {
        match self.varlen.and_then(|v| v.total_q) {
            Some(total) => total.max(self.seqlen_q),
            None => self.batch.saturating_mul(self.seqlen_q),
        }
    }

    /// (batch, rows) of q/out and of k/v as laid out in memory: packed (varlen) tensors are
    /// one batch of all rows, paged K/V a batch of `num_pages` pages of `page_size` rows.
    pub fn batches_and_rows(&self) -> [(usize, usize); 2] {
        let q = match self.varlen.and_then(|v| v.total_q) {
            Some(t) => (1, t),
            None => (self.batch, self.seqlen_q),
        };
        let kv = match (self.paged, self.varlen.and_then(|v| v.total_k)) {
            (Some(pg), _) => (pg.num_pages, pg.page_size),
            (None, Some(t)) => (1, t),
            (None, None) => (self.batch, self.seqlen_k),
        };
        [q, kv]
    }

    /// Whether the kernel must read per-sequence lengths or offsets.
    pub fn is_varlen(&self) -> bool {
        self.varlen.is_some_and(|v| v != Varlen::default())
    }
}

/// FA4's canonical form of (causal, window): causal forces `wr = 0`; a window whose sides sum
/// below 0 is dropped entirely (so `(-1, 0)` is full attention, `(-1, -1)` no window);
/// `(None, 0)` is plain causal; any other window is local.
pub fn resolve_mask(
    causal: bool,
    window: (Option<i64>, Option<i64>),
) -> (Mask, Option<i64>, Option<i64>) {
    let (mut wl, mut wr) = window;
    if causal {
        wr = Some(0);
    }
    if let (Some(l), Some(r)) = (wl, wr)
        && l.saturating_add(r) < 0
    {
        wl = None;
        wr = None;
    }
    match (wl, wr) {
        (None, None) => (if causal { Mask::Causal } else { Mask::None }, None, None),
        (None, Some(0)) => (Mask::Causal, None, None),
        _ => (Mask::Local, wl, wr),
    }
}

/// A validated problem: what selection and the launch need, all range-checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated {
    pub mask: Mask,
    pub group: usize,
    pub scale: f32,
    /// `num_splits` as asked (`< 1`: the heuristic decides in `select`).
    pub num_splits: i32,
    /// FwdParams with every field but the pointers filled in.
    pub params: FwdParams,
}

const I32_MAX: usize = i32::MAX as usize;

/// The window side the kernels get for an unbounded one, and the widest any side may be:
/// wider than any sequence (Sq, Sk < 2^30), so it hides nothing, and narrow enough that the
/// masks' bounds i + (Sk - Sq) - wl and i + (Sk - Sq) + wr + 1 stay in int. (Sq + Sk, the
/// stand-in before, wrapped there past 2^30 keys: i + 2 Sk + 1, and a one-sided window's rows
/// saw no key.) A constant, not the call's lengths: a caller's understated max_seqlen_k
/// narrows no window.
pub const WINDOW_UNBOUNDED: i32 = (1 << 30) - 1;

fn check_range(
    field: &'static str,
    v: usize,
    lo: usize,
    hi: usize,
    what: &str,
) -> Result<(), Error> {
    if v < lo || v > hi {
        return Err(Error::invalid(field, v, format!("{what} ({lo}..={hi})")));
    }
    Ok(())
}

fn check_strides(name: &'static str, s: &Strides) -> Result<(), Error> {
    for (v, what) in [(s.batch, "batch"), (s.row, "row"), (s.head, "head")] {
        if v < 0 || v % 8 != 0 {
            return Err(Error::invalid(
                name,
                format!("{what} stride {v}"),
                "non-negative strides that are multiples of 8 elements (16-byte aligned rows); the last dim must be contiguous",
            ));
        }
    }
    Ok(())
}

impl Problem {
    /// Check every field and compute the launch values. Errors name the field at fault.
    pub fn validate(&self) -> Result<Validated, Error> {
        check_range("batch", self.batch, 0, 65535, "batch size")?;
        check_range("seqlen_q", self.seqlen_q, 0, I32_MAX / 2, "query length")?;
        check_range("seqlen_k", self.seqlen_k, 0, I32_MAX / 2, "key length")?;
        check_range("heads", self.heads, 1, 65535, "query heads")?;
        check_range(
            "heads_kv",
            self.heads_kv,
            1,
            self.heads,
            "key/value heads, at most heads",
        )?;
        if !self.heads.is_multiple_of(self.heads_kv) {
            return Err(Error::invalid(
                "heads_kv",
                self.heads_kv,
                format!(
                    "a divisor of heads = {} (GQA groups must be equal)",
                    self.heads
                ),
            ));
        }
        for (field, d) in [("head_dim", self.head_dim), ("head_dim_v", self.head_dim_v)] {
            if d == 0 || !d.is_multiple_of(8) || d > 256 {
                return Err(Error::invalid(field, d, "a multiple of 8 in 8..=256"));
            }
        }
        let scale = self
            .softmax_scale
            .unwrap_or(1.0 / (self.head_dim as f32).sqrt());
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Error::invalid("softmax_scale", scale, "a finite value > 0"));
        }
        for (field, w) in [
            ("window.left", self.window.0),
            ("window.right", self.window.1),
        ] {
            if let Some(w) = w
                && w.unsigned_abs() > WINDOW_UNBOUNDED as u64
            {
                return Err(Error::invalid(field, w, "|window| < 2^30"));
            }
        }
        check_strides("q_strides", &self.q_strides)?;
        check_strides("k_strides", &self.k_strides)?;
        check_strides("v_strides", &self.v_strides)?;
        check_strides("o_strides", &self.o_strides)?;
        // K/V tile loads index rows within a tile in 32 bits (it keeps the main loop in
        // registers): 256 rows of the stride must stay below 2^31 elements.
        for (field, s) in [
            ("k_strides", &self.k_strides),
            ("v_strides", &self.v_strides),
        ] {
            if s.row > 1 << 23 {
                return Err(Error::invalid(
                    field,
                    format!("row stride {}", s.row),
                    "a row stride of at most 2^23 elements",
                ));
            }
        }
        if !(self.softcap.is_finite() && self.softcap >= 0.0) {
            return Err(Error::invalid(
                "softcap",
                self.softcap,
                "0 (off) or a finite value > 0",
            ));
        }
        if self.num_splits > 256 {
            return Err(Error::invalid(
                "num_splits",
                self.num_splits,
                "at most 256 (1: no split, < 1: heuristic)",
            ));
        }
        if self.batch * (self.num_splits.max(1) as usize) > 65535 {
            return Err(Error::invalid(
                "num_splits",
                self.num_splits,
                format!("batch * num_splits <= 65535 (batch {})", self.batch),
            ));
        }
        if let Some(v) = self.varlen {
            for (field, t) in [("cu_seqlens_q", v.total_q), ("cu_seqlens_k", v.total_k)] {
                if let Some(t) = t
                    && t > I32_MAX / 2
                {
                    return Err(Error::invalid(field, t, "total rows < 2^30"));
                }
            }
            if v.total_k.is_some() && self.paged.is_some() {
                return Err(Error::invalid(
                    "cu_seqlens_k",
                    "given with a page_table",
                    "either cu_seqlens_k or a page table (FA4: incompatible)",
                ));
            }
        }
        if let Some(pg) = self.paged {
            check_range("page_size", pg.page_size, 1, 1 << 20, "keys per page")?;
            check_range("num_pages", pg.num_pages, 1, I32_MAX, "pages in k/v")?;
            check_range(
                "pages_per_seq",
                pg.pages_per_seq,
                1,
                I32_MAX,
                "page table columns",
            )?;
            if pg.page_table_stride < pg.pages_per_seq || pg.page_table_stride > I32_MAX {
                return Err(Error::invalid(
                    "page_table_stride",
                    pg.page_table_stride,
                    format!("pages_per_seq = {} to 2^31 - 1", pg.pages_per_seq),
                ));
            }
            if self.seqlen_k > pg.pages_per_seq * pg.page_size {
                return Err(Error::invalid(
                    "seqlen_k",
                    self.seqlen_k,
                    format!(
                        "at most pages_per_seq * page_size = {}",
                        pg.pages_per_seq * pg.page_size
                    ),
                ));
            }
        }
        // Every buffer's and the split workspace's size in bytes (fp32 partials, at most 256
        // splits where the heuristic picks) fits in an i64, so no size or stride derived from
        // the shape wraps.
        let splits = if self.num_splits < 1 {
            256
        } else {
            self.num_splits as usize
        };
        let bytes = self
            .total_q()
            .checked_mul(self.heads)
            .and_then(|x| x.checked_mul(self.head_dim.max(self.head_dim_v) + 1))
            .and_then(|x| x.checked_mul(splits))
            .and_then(|x| x.checked_mul(4));
        if bytes.is_none_or(|b| b > i64::MAX as usize) {
            return Err(Error::invalid(
                "heads",
                self.heads,
                format!(
                    "rows ({}) x heads x (head dim + 1) x {splits} splits x 4 bytes below 2^63",
                    self.total_q()
                ),
            ));
        }
        // The kernels count (query, head) rows in int (`counted_rows`; a combine's Sq * H per
        // sequence too). 2^31 of them hold at least 32 GiB of output at head dim 8. (The
        // flagship's tiles are bounded in `select`.)
        let rows = self.counted_rows();
        if rows.saturating_mul(self.heads) > I32_MAX {
            return Err(Error::invalid(
                "seqlen_q",
                self.seqlen_q,
                format!("query rows ({rows}) x heads ({}) below 2^31", self.heads),
            ));
        }
        let group = self.heads / self.heads_kv;
        if self.seqlen_q * group > I32_MAX / 2 {
            return Err(Error::invalid(
                "seqlen_q",
                self.seqlen_q,
                format!("seqlen_q * (heads / heads_kv) < 2^30 (group {group})"),
            ));
        }
        let (mask, wl, wr) = resolve_mask(self.causal, self.window);
        // (|side| <= WINDOW_UNBOUNDED, checked above.)
        let side = |w: Option<i64>| w.map_or(WINDOW_UNBOUNDED, |w| w as i32);
        let params = FwdParams {
            q_batch_stride: self.q_strides.batch,
            q_row_stride: self.q_strides.row,
            q_head_stride: self.q_strides.head,
            k_batch_stride: self.k_strides.batch,
            k_row_stride: self.k_strides.row,
            k_head_stride: self.k_strides.head,
            v_batch_stride: self.v_strides.batch,
            v_row_stride: self.v_strides.row,
            v_head_stride: self.v_strides.head,
            o_batch_stride: self.o_strides.batch,
            o_row_stride: self.o_strides.row,
            o_head_stride: self.o_strides.head,
            lse_batch_stride: (self.heads * self.seqlen_q) as i64,
            lse_head_stride: self.seqlen_q as i64,
            batch: self.batch as i32,
            seqlen_q: self.seqlen_q as i32,
            seqlen_k: self.seqlen_k as i32,
            heads: self.heads as i32,
            heads_kv: self.heads_kv as i32,
            group: group as i32,
            window_left: side(wl),
            window_right: side(wr),
            scale_log2: if self.softcap > 0.0 {
                self.softcap * std::f32::consts::LOG2_E
            } else {
                scale * std::f32::consts::LOG2_E
            },
            softcap_scale: if self.softcap > 0.0 {
                scale / self.softcap
            } else {
                0.0
            },
            page_size: self.paged.map_or(0, |pg| pg.page_size as i32),
            page_table_batch_stride: self.paged.map_or(0, |pg| pg.page_table_stride as i64),
            ..FwdParams::default()
        };
        if !(params.scale_log2.is_finite() && params.softcap_scale.is_finite()) {
            return Err(Error::invalid(
                if self.softcap > 0.0 {
                    "softcap"
                } else {
                    "softmax_scale"
                },
                if self.softcap > 0.0 {
                    self.softcap
                } else {
                    scale
                },
                "a value whose exp2-domain scale (softmax_scale * log2 e, or softcap * log2 e and \
                 softmax_scale / softcap) is finite",
            ));
        }
        let mut params = params;
        if let Some(total_q) = self.varlen.and_then(|v| v.total_q) {
            params.lse_head_stride = total_q as i64; // LSE (H, total_q)
        }
        Ok(Validated {
            mask,
            group,
            scale,
            num_splits: self.num_splits,
            params,
        })
    }

    /// Elements the q, k, v, out buffers must hold, and the LSE's (B * H * Sq, or
    /// H * total_q when q is packed).
    pub fn extents(&self) -> Result<[usize; 5], Error> {
        let e = |name: &'static str, s: &Strides, b: usize, sl: usize, h: usize, d: usize| {
            s.extent(b, sl, h, d).ok_or_else(|| {
                Error::invalid(
                    name,
                    format!("{s:?}"),
                    "strides whose extent fits in memory",
                )
            })
        };
        let [(qb, qs), (kb, ks)] = self.batches_and_rows();
        Ok([
            e(
                "q_strides",
                &self.q_strides,
                qb,
                qs,
                self.heads,
                self.head_dim,
            )?,
            e(
                "k_strides",
                &self.k_strides,
                kb,
                ks,
                self.heads_kv,
                self.head_dim,
            )?,
            e(
                "v_strides",
                &self.v_strides,
                kb,
                ks,
                self.heads_kv,
                self.head_dim_v,
            )?,
            e(
                "o_strides",
                &self.o_strides,
                qb,
                qs,
                self.heads,
                self.head_dim_v,
            )?,
            self.heads.saturating_mul(self.total_q()),
        ])
    }

    /// Whether out is exactly a dense `(B, Sq, H, Dv)` block (then it can be memset).
    pub(crate) fn out_is_dense(&self) -> bool {
        !self.is_varlen()
            && self.o_strides == Strides::contiguous(self.seqlen_q, self.heads, self.head_dim_v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fa4_window_canonicalisation() {
        assert_eq!(resolve_mask(false, (None, None)), (Mask::None, None, None));
        assert_eq!(resolve_mask(true, (None, None)), (Mask::Causal, None, None));
        assert_eq!(
            resolve_mask(false, (None, Some(0))),
            (Mask::Causal, None, None)
        );
        assert_eq!(
            resolve_mask(false, (Some(-1), Some(0))),
            (Mask::None, None, None)
        );
        assert_eq!(
            resolve_mask(false, (Some(-1), Some(-1))),
            (Mask::None, None, None)
        );
        assert_eq!(
            resolve_mask(true, (Some(-5), None)),
            (Mask::Causal, None, None)
        );
        assert_eq!(
            resolve_mask(true, (Some(128), None)),
            (Mask::Local, Some(128), Some(0))
        );
        assert_eq!(
            resolve_mask(false, (Some(128), Some(0))),
            (Mask::Local, Some(128), Some(0))
        );
        assert_eq!(
            resolve_mask(false, (None, Some(-3))),
            (Mask::Local, None, Some(-3))
        );
        assert_eq!(
            resolve_mask(false, (Some(-3), None)),
            (Mask::Local, Some(-3), None)
        );
        assert_eq!(
            resolve_mask(false, (Some(-3), Some(10))),
            (Mask::Local, Some(-3), Some(10))
        );
    }

    #[test]
    fn validation_names_the_field() {
        let ok = Problem::new(DType::Bf16, 2, 100, 200, 6, 3, 128, 128);
        let v = ok.validate().unwrap();
        assert_eq!(v.group, 2);
        assert_eq!(v.params.window_left, WINDOW_UNBOUNDED);
        type Mutation = Box<dyn Fn(&mut Problem)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|p| p.heads_kv = 4), "heads_kv"),
            (Box::new(|p| p.heads_kv = 0), "heads_kv"),
            (Box::new(|p| p.heads = 0), "heads"),
            (Box::new(|p| p.head_dim = 100), "head_dim"),
            (Box::new(|p| p.head_dim_v = 512), "head_dim_v"),
            (
                Box::new(|p| p.softmax_scale = Some(f32::NAN)),
                "softmax_scale",
            ),
            (Box::new(|p| p.softmax_scale = Some(-1.0)), "softmax_scale"),
            (Box::new(|p| p.q_strides.row = 7), "q_strides"),
            (Box::new(|p| p.k_strides.head = -8), "k_strides"),
            (
                Box::new(|p| p.window = (Some(1 << 40), None)),
                "window.left",
            ),
            (Box::new(|p| p.batch = 1 << 20), "batch"),
            (Box::new(|p| p.v_strides.row = 1 << 24), "v_strides"),
            (Box::new(|p| p.softcap = 1e-40), "softcap"),
            (Box::new(|p| p.softmax_scale = Some(3e38)), "softmax_scale"),
        ];
        for (mutate, field) in cases {
            let mut p = ok.clone();
            mutate(&mut p);
            match p.validate() {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    /// Shapes whose products pass i64 (a review's cases): each is refused by name, and no
    /// helper on the way panics or wraps, in debug builds too.
    #[test]
    fn products_past_i64_are_refused_not_wrapped() {
        // Every dimension in range, strides 0 (so every extent is one row), but rows x heads x
        // dv x 256 splits x 4 bytes is 2^71: the workspace size and split stride would wrap.
        let mut p = Problem::new(DType::Bf16, 255, (1 << 30) - 1, 16, 65535, 65535, 256, 256);
        p.num_splits = 256;
        for s in [
            &mut p.q_strides,
            &mut p.k_strides,
            &mut p.v_strides,
            &mut p.o_strides,
        ] {
            *s = Strides {
                batch: 0,
                row: 0,
                head: 0,
            };
        }
        match p.validate() {
            Err(Error::Invalid { field, .. }) => assert_eq!(field, "heads"),
            other => panic!("{other:?}"),
        }
        // A page-table stride of 2^62.4 made (B - 1) * stride + pages wrap to 3 entries.
        let mut p = Problem::new(DType::Bf16, 4, 1, 16, 8, 8, 128, 128);
        p.paged = Some(Paged {
            page_size: 16,
            num_pages: 4,
            pages_per_seq: 1,
            page_table_stride: 6148914691236517206,
        });
        match p.validate() {
            Err(Error::Invalid { field, .. }) => assert_eq!(field, "page_table_stride"),
            other => panic!("{other:?}"),
        }
        // Unvalidated helpers saturate: extents refuse what they cannot hold.
        let huge = Strides::contiguous(1 << 40, 1 << 20, 1 << 10);
        assert_eq!(huge.batch, i64::MAX);
        assert_eq!(huge.extent(2, 1, 1, 8), None);
        let edge = Strides {
            batch: i64::MAX - 7,
            row: 8,
            head: 8,
        };
        assert_eq!(edge.extent(2, 1, 1, 8), None);
        let mut p = Problem::new(DType::Bf16, 65535, (1 << 30) - 1, 16, 4194240, 1, 8, 8);
        assert!(p.extents().is_err() || p.validate().is_err());
        p.heads = 8;
        assert!(p.validate().is_err());
        assert_eq!(
            resolve_mask(false, (Some(i64::MAX), Some(1))),
            (Mask::Local, Some(i64::MAX), Some(1))
        );
    }

    /// The window sides the kernels get keep every row's visible keys and keep the kernels'
    /// bounds in int range; calls of 2^31 or more (query, head) rows are refused (the kernels
    /// count them in int). Both found by review: zero strides make such shapes cheap to pass.
    #[test]
    fn kernel_int_math_stays_in_range() {
        let zero = Strides {
            batch: 0,
            row: 0,
            head: 0,
        };
        // Visibility with the caller's sides (i64, None unbounded) against the params'.
        let visible = |i: i64, j: i64, sq: i64, sk: i64, wl: Option<i64>, wr: Option<i64>| {
            let off = sk - sq;
            let lo = wl.map_or(0, |w| (i + off - w).max(0));
            let hi = wr.map_or(sk, |w| (i + off + w + 1).min(sk));
            lo <= j && j < hi
        };
        let sides = [
            None,
            Some(-60),
            Some(-7),
            Some(-1),
            Some(0),
            Some(3),
            Some(29),
            Some(64),
            Some((1 << 30) - 1),
            Some(-(1 << 30) + 1),
        ];
        for (sq, sk) in [(1, 1), (7, 40), (40, 7), (33, 33), (1, 50)] {
            for wl in sides {
                for wr in sides {
                    let mut p = Problem::new(DType::Bf16, 1, sq, sk, 1, 1, 64, 64);
                    p.window = (wl, wr);
                    let (mask, l, r) = resolve_mask(false, p.window);
                    if mask != Mask::Local {
                        continue;
                    }
                    let v = p.validate().unwrap();
                    let (pl, pr) = (
                        Some(v.params.window_left as i64),
                        Some(v.params.window_right as i64),
                    );
                    let (sq, sk) = (sq as i64, sk as i64);
                    for i in 0..sq {
                        for j in 0..sk {
                            assert_eq!(
                                visible(i, j, sq, sk, l, r),
                                visible(i, j, sq, sk, pl, pr),
                                "Sq {sq} Sk {sk} window ({wl:?}, {wr:?}) row {i} key {j}"
                            );
                        }
                    }
                }
            }
        }
        // A one-sided window over 2^30 - 1 keys: its bounds stay in int (with Sq + Sk for the
        // unbounded side, i + 2 Sk + 1 wrapped and every row read no key).
        let mut p = Problem::new(DType::Bf16, 1, 2, (1 << 30) - 1, 1, 1, 64, 64);
        p.window = (Some(128), None);
        p.k_strides = zero;
        p.v_strides = zero;
        let v = p.validate().unwrap();
        let (wl, wr) = (v.params.window_left as i64, v.params.window_right as i64);
        let (sq, sk) = (2i64, (1i64 << 30) - 1);
        for i in 0..sq {
            for bound in [i + sk - sq - wl, i + sk - sq + wr + 1] {
                assert!(i32::try_from(bound).is_ok(), "bound {bound} past int");
            }
        }
        // 2.4e9 query rows of one head.
        let mut p = Problem::new(DType::Bf16, 4, 600_000_000, 600_000_000, 1, 1, 8, 8);
        for s in [
            &mut p.q_strides,
            &mut p.k_strides,
            &mut p.v_strides,
            &mut p.o_strides,
        ] {
            *s = zero;
        }
        match p.validate() {
            Err(Error::Invalid { field, .. }) => assert_eq!(field, "seqlen_q"),
            other => panic!("{other:?}"),
        }
        // A batch of 2^63 is no extent (it panicked in debug builds: b as i64 - 1).
        assert_eq!(Strides::contiguous(1, 1, 8).extent(1 << 63, 1, 1, 8), None);
    }
}
