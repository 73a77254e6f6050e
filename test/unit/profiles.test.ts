/**
 * Profiles: every shipped file loads; derived sizes agree with `reference/models.json`
 * (our copy of the model configs' arithmetic); bad files and unknown ids give one-line
 * `UserError`s with the field path and value.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { attentionParams, deriveModel, totalParams } from '../../hardware-profiles/derive.ts';
import {
  listCpus,
  listGpus,
  listHardware,
  listModels,
  listPcie,
  loadCpu,
  loadGpu,
  loadHardware,
  loadModel,
  loadPcie,
  PROFILES_DIR,
} from '../../hardware-profiles/load.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { sharedData } from '../helpers/shared-data.ts';

const GIB = 2 ** 30;

const REQUIRED_MODELS = [
  'mixtral-8x7b',
  'mixtral-8x22b',
  'deepseek-v2',
  'deepseek-v2-lite',
  'deepseek-r1',
  'switch-base-128',
  'switch-large-128',
  'nllb-moe-128',
  'snowflake-arctic',
  'qwen1.5-moe-a2.7b',
  'olmoe',
  'dbrx',
  'qwen3-30b-a3b',
];
const REQUIRED_TESTBEDS = [
  'a5000-pcie4-1tb',
  'a6000-pcie4-512gb',
  'moe-gen-c1',
  'moe-gen-c2',
  'moe-gen-c3',
  'a40-xeon8380-750gb',
  't4',
  'l4',
  'rtx3090',
  'rtx4090',
  'a100-80gb',
  'h100',
  'h200',
];

/** models.json entry id → our profile ids (same architecture). */
const PROFILES_OF: Record<string, string[]> = {
  'olmoe-1b-7b-0924': ['olmoe'],
  'nllb-moe-54b': ['nllb-moe-128'],
  'deepseek-v3': ['deepseek-v3', 'deepseek-r1'],
};

interface RefModel {
  id: string;
  num_layers: number;
  moe_layers: number;
  first_dense_layers?: number;
  hidden_size: number;
  expert_intermediate_size: number;
  num_routed_experts: number;
  top_k: number;
  vocab_size: number;
  tied_embeddings?: boolean;
  shared_experts: { count: number; intermediate_size?: number; intermediate_size_each?: number } | null;
  attention: {
    num_heads: number;
    num_kv_heads: number;
    head_dim?: number;
    kv_lora_rank?: number;
    q_lora_rank?: number | null;
  };
  params_per_routed_expert: number;
  bytes_per_routed_expert_bf16: number;
  bytes_all_routed_experts_per_moe_layer_bf16: number;
  shared_expert_params_per_moe_layer?: number;
  attention_params_per_layer?: number;
  computed_total_params: number;
  computed_total_bytes_bf16: number;
  kv_cache_bytes_per_token_bf16?: number;
  kv_cache_bytes_per_token_bf16_decoder_self_attn?: number;
}
// Reference data beside the checkout (../shared/reference): skipped with a reason when absent.
const reference = sharedData('reference/models.json');
const refModels = reference.present ? reference.json<{ models: RefModel[] }>('reference/models.json').models : [];

/** Writes `content` to a fresh temporary file and returns its path. */
function tempFile(name: string, content: unknown): string {
  const path = join(mkdtempSync(join(tmpdir(), 'moesim-profiles-')), name);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

function userError(fn: () => unknown): UserError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return e as UserError;
  }
  throw new Error('expected a UserError');
}

describe('shipped profiles load', () => {
  it('has every required model and testbed id', () => {
    expect(listModels()).toEqual(expect.arrayContaining(REQUIRED_MODELS));
    expect(listHardware()).toEqual(expect.arrayContaining(REQUIRED_TESTBEDS));
  });

  it.each(listModels())('model %s loads, is consistent and frozen', (id) => {
    const m = loadModel(id);
    expect(m.id).toBe(id);
    expect(m.moeLayerIndices).toHaveLength(m.moeLayers);
    expect(m.moeLayerIndices.every((v, i, a) => v < m.layers && (i === 0 || v > (a[i - 1] as number)))).toBe(true);
    expect(m.sources.length).toBeGreaterThan(0);
    for (const v of Object.values(m.derived)) expect(Number.isFinite(v) && v >= 0).toBe(true);
    expect(Number.isInteger(m.derived.bytesPerExpert) && Number.isInteger(m.derived.totalBytes)).toBe(true);
    expect(m.derived.totalBytes).toBe(m.derived.nonExpertBytes + m.derived.allExpertBytes);
    expect(Object.isFrozen(m) && Object.isFrozen(m.derived) && Object.isFrozen(m.attention)).toBe(true);
    expect(loadModel(id)).toBe(m); // cached
  });

  it.each(listHardware())('testbed %s loads with its components', (id) => {
    const hw = loadHardware(id);
    expect(hw.id).toBe(id);
    expect(hw.gpu.vramBytes).toBeGreaterThan(0);
    expect(hw.cpu.cores).toBeGreaterThan(0);
    expect(hw.pcie.h2dBytesPerSec).toBeGreaterThan(0);
    expect(hw.hostDramBytes).toBeGreaterThan(hw.gpu.vramBytes);
    expect(hw.sources.length).toBeGreaterThan(0);
    expect(Object.isFrozen(hw.gpu)).toBe(true);
  });

  it('every GPU, CPU and PCIe file loads', () => {
    for (const id of listGpus()) expect(loadGpu(id).id).toBe(id);
    for (const id of listCpus()) expect(loadCpu(id).id).toBe(id);
    for (const id of listPcie()) expect(loadPcie(id).id).toBe(id);
    expect(listGpus()).toEqual(
      expect.arrayContaining([
        't4',
        'l4',
        'rtx3090',
        'rtx4090',
        'rtx-a5000',
        'rtx-a6000',
        'a40',
        'a100-40gb-pcie',
        'a100-80gb-pcie',
        'a100-80gb-sxm',
        'h100-pcie',
        'h100-sxm',
        'h200-sxm',
        'l40s',
      ]),
    );
    expect(listCpus()).toEqual(
      expect.arrayContaining(['epyc-7453', 'epyc-7313p', 'xeon-8380', 'xeon-8358p', 'desktop-16c']),
    );
    expect(listPcie()).toEqual(expect.arrayContaining(['gen3-x16', 'gen4-x16', 'gen4-x16-measured-19p5', 'gen5-x16']));
  });

  it('converts units: GiB, GB/s, TFLOP/s, µs', () => {
    const hw = loadHardware('moe-gen-c1');
    expect(hw.gpu).toMatchObject({
      vramBytes: 24 * GIB,
      hbmBytesPerSec: 768e9,
      bf16FlopsPerSec: 111.1e12,
      kernelLaunchNs: 5000,
    });
    expect(hw.cpu.id).toBe('epyc-7453');
    expect(hw.cpu.cores).toBe(28);
    // 8 channels × 3200 MT/s × 8 B × 0.8 sustained.
    expect(hw.cpu.dramBytesPerSec).toBeCloseTo(163.84e9, -3);
    expect(hw.pcie).toMatchObject({ generation: 4, h2dBytesPerSec: 25e9, latencyNs: 10_000 }); // pcie/gen4-x16.json (variant -pcie19p5: 19.5 GB/s)
    expect(hw.hostDramBytes).toBe(256 * GIB);
    expect(loadHardware('moe-gen-c3')).toMatchObject({
      hostDramBytes: 480 * GIB,
      gpu: { id: 'rtx-a6000' },
      cpu: { id: 'epyc-7313p', cores: 16 },
    });
    expect(loadHardware('a40-xeon8380-750gb')).toMatchObject({
      hostDramBytes: 750 * GIB,
      gpu: { id: 'a40' },
      cpu: { id: 'xeon-8380' },
    });
    expect(loadHardware('a5000-pcie4-1tb').hostDramBytes).toBe(1024 * GIB);
  });

  it('an expert GEMM needs on the order of 10^3 tokens to saturate every GPU', () => {
    for (const id of listGpus()) {
      const { halfSaturationTokens } = loadGpu(id).gemmEfficiency;
      // 90 % of maxFraction at 9 × halfSaturationTokens.
      expect(9 * halfSaturationTokens).toBeGreaterThanOrEqual(500);
      expect(9 * halfSaturationTokens).toBeLessThanOrEqual(5000);
    }
  });
});

describe.skipIf(!reference.present)(reference.title('derived sizes agree with reference/models.json'), () => {
  it('Mixtral-8x7B expert = 352 321 536 B', () => {
    expect(loadModel('mixtral-8x7b').derived.bytesPerExpert).toBe(352_321_536);
  });

  it('every models.json entry has a profile', () => {
    for (const r of refModels) for (const id of PROFILES_OF[r.id] ?? [r.id]) expect(listModels()).toContain(id);
  });

  describe.each(refModels.flatMap((r) => (PROFILES_OF[r.id] ?? [r.id]).map((id) => [id, r] as const)))(
    '%s',
    (id, r) => {
      const m = loadModel(id);

      it('architecture numbers', () => {
        expect(m.layers).toBe(r.num_layers);
        expect(m.moeLayers).toBe(r.moe_layers);
        expect(m.layers - m.moeLayers).toBe(r.first_dense_layers ?? r.num_layers - r.moe_layers);
        expect(m.hiddenSize).toBe(r.hidden_size);
        expect(m.expertIntermediateSize).toBe(r.expert_intermediate_size);
        expect(m.experts).toBe(r.num_routed_experts);
        expect(m.topK).toBe(r.top_k);
        expect(m.vocabSize).toBe(r.vocab_size);
        if (r.tied_embeddings !== undefined) expect(m.tiedEmbeddings).toBe(r.tied_embeddings);
        expect(m.attention.heads).toBe(r.attention.num_heads);
        expect(m.attention.kvHeads).toBe(r.attention.num_kv_heads);
        if (r.attention.head_dim !== undefined) expect(m.attention.headDim).toBe(r.attention.head_dim);
        if (r.attention.kv_lora_rank !== undefined) expect(m.attention.kvLoraRank).toBe(r.attention.kv_lora_rank);
        if (r.attention.q_lora_rank !== undefined)
          expect(m.attention.qLoraRank).toBe(r.attention.q_lora_rank ?? undefined);
        const shared = r.shared_experts;
        if (shared) {
          expect(m.sharedExperts).toBe(shared.count);
          expect(m.sharedIntermediateSize).toBe(
            shared.intermediate_size ?? (shared.intermediate_size_each ?? 0) * shared.count,
          );
        }
      });

      it('expert, attention and shared parameters; KV bytes per token', () => {
        expect(m.derived.paramsPerExpert).toBe(r.params_per_routed_expert);
        if (m.dtypes.expertBytesPerParam === 2) {
          expect(m.derived.bytesPerExpert).toBe(r.bytes_per_routed_expert_bf16);
          expect(m.experts * m.derived.bytesPerExpert).toBe(r.bytes_all_routed_experts_per_moe_layer_bf16);
        }
        if (r.attention_params_per_layer !== undefined)
          expect(attentionParams(m, m.details)).toBe(r.attention_params_per_layer);
        if (
          r.shared_experts &&
          r.shared_expert_params_per_moe_layer !== undefined &&
          m.dtypes.expertBytesPerParam === 2
        ) {
          expect(m.derived.sharedExpertBytesPerLayer).toBe(2 * r.shared_expert_params_per_moe_layer);
        }
        const kvRef = r.kv_cache_bytes_per_token_bf16 ?? r.kv_cache_bytes_per_token_bf16_decoder_self_attn;
        expect(kvRef).toBeDefined();
        // The reference counts BF16 (2-byte) KV; FP32 checkpoints (Switch, NLLB) cache 4-byte elements.
        expect(m.derived.kvBytesPerToken).toBe((kvRef! * m.dtypes.kvBytesPerElement) / 2);
      });

      it('total parameters within 0.01 % (exact for decoder-only models)', () => {
        const total = totalParams(m);
        expect(Math.abs(total - r.computed_total_params) / r.computed_total_params).toBeLessThan(1e-4);
        if (m.dtypes.expertBytesPerParam === 2 && m.dtypes.attentionBytesPerParam === 2) {
          expect(
            Math.abs(m.derived.totalBytes - r.computed_total_bytes_bf16) / r.computed_total_bytes_bf16,
          ).toBeLessThan(1e-4);
        }
      });
    },
  );

  it('DeepSeek-R1 is DeepSeek-V3 architecturally', () => {
    expect(loadModel('deepseek-r1').derived).toEqual(loadModel('deepseek-v3').derived);
  });

  it('MoE layer placement: dense leading layers, encoder-decoder sparse steps', () => {
    expect(loadModel('deepseek-v2').moeLayerIndices[0]).toBe(1);
    expect(loadModel('deepseek-r1').moeLayerIndices.slice(0, 2)).toEqual([3, 4]);
    expect(loadModel('mixtral-8x7b').moeLayerIndices).toEqual(Array.from({ length: 32 }, (_, i) => i));
    // Switch: odd blocks of each 12-layer stack (HF: i % sparse_step == 1).
    expect(loadModel('switch-base-128').moeLayerIndices).toEqual([1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23]);
    // NLLB: every 4th FFN of each 24-layer stack (HF: (i + 1) % 4 == 0).
    expect(loadModel('nllb-moe-128').moeLayerIndices).toEqual([3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47]);
    expect(loadModel('nllb-moe-128').name).toBe('NLLB-MoE-54B (128 experts)');
  });

  it('Switch and NLLB ship in FP32 as released: 18.9 MB (base), 33.5 MB (large, the paper\'s "33MB"); 9.4 / 16.8 MB in BF16', () => {
    const base = loadModel('switch-base-128');
    const large = loadModel('switch-large-128');
    expect(base.ffnMatrices).toBe(2);
    expect(base.derived.bytesPerExpert).toBe(18_874_368); // Pre-gated MoE's switch-base size
    expect(large.derived.bytesPerExpert).toBe(33_554_432); // ≈ 33.5 MB, MoE-Infinity §2.1
    expect(loadModel('nllb-moe-128').derived.bytesPerExpert).toBe(4 * 33_564_672);
    const bf16 = { expertBytesPerParam: 2, attentionBytesPerParam: 2, embeddingBytesPerParam: 2, kvBytesPerElement: 2 };
    expect(deriveModel({ ...base, dtypes: bf16 }).bytesPerExpert).toBe(2 * 768 * 3072 * 2); // 9 437 184
    expect(deriveModel({ ...large, dtypes: bf16 }).bytesPerExpert).toBe(2 * 1024 * 4096 * 2); // 16 777 216
  });

  it('MLA: latent KV and absorbed score FLOPs', () => {
    const v2 = loadModel('deepseek-v2');
    expect(v2.derived.kvBytesPerTokenPerLayer).toBe((512 + 64) * 2);
    // 2 · 128 · (512 + 64) for QKᵀ + 2 · 128 · 512 for AV.
    expect(v2.derived.attentionScoreFlopsPerContextToken).toBe(2 * 128 * 576 + 2 * 128 * 512);
    // GQA: 4 · heads · headDim.
    expect(loadModel('mixtral-8x7b').derived.attentionScoreFlopsPerContextToken).toBe(4 * 32 * 128);
  });

  it('FLOPs are 2 × parameters touched', () => {
    const m = loadModel('qwen1.5-moe-a2.7b');
    expect(m.derived.expertFlopsPerToken).toBe(2 * 8_650_752);
    expect(m.derived.sharedExpertFlopsPerToken).toBe(2 * 34_605_056);
    expect(m.derived.routerFlopsPerToken).toBe(2 * 2048 * 60);
    expect(m.derived.lmHeadFlopsPerToken).toBe(2 * 151_936 * 2048);
    expect(m.derived.attentionProjFlopsPerToken).toBe(2 * 16_783_360);
  });

  it('re-derives with other dtypes (details travel with the loaded profile)', () => {
    const m = loadModel('qwen1.5-moe-a2.7b');
    const int4 = deriveModel({ ...m, dtypes: { ...m.dtypes, expertBytesPerParam: 0.5 } });
    expect(int4.bytesPerExpert).toBe(8_650_752 / 2);
    expect(int4.attentionBytesPerLayer).toBe(m.derived.attentionBytesPerLayer);
    expect(loadModel('deepseek-r1-fp8').derived.bytesPerExpert).toBe(
      loadModel('deepseek-r1').derived.bytesPerExpert / 2,
    );
  });
});

describe('errors', () => {
  const mixtralFile = resolve(PROFILES_DIR, 'models', 'mixtral-8x7b.json');
  const mixtral = JSON.parse(readFileSync(mixtralFile, 'utf8')) as Record<string, unknown>;

  it('unknown model id lists the known ids', () => {
    const e = userError(() => loadModel('mixtral-9x9b'));
    expect(e.field).toBe('model');
    expect(e.value).toBe('mixtral-9x9b');
    expect(e.message).toMatch(/^unknown model \(known: .*mixtral-8x7b.*\)$/);
    expect(e.oneLine()).toContain('(got "mixtral-9x9b")');
  });

  it('unknown hardware id lists the known testbeds', () => {
    const e = userError(() => loadHardware('a5000'));
    expect(e).toMatchObject({ field: 'hardware', value: 'a5000' });
    expect(e.message).toContain('a5000-pcie4-1tb');
  });

  it('loads a model by path', () => {
    const path = tempFile('custom.json', { ...mixtral, id: 'custom-mixtral' });
    expect(loadModel(path)).toMatchObject({ id: 'custom-mixtral', derived: { bytesPerExpert: 352_321_536 } });
    expect(loadModel(mixtralFile)).toMatchObject({ id: 'mixtral-8x7b' });
  });

  it('an invalid field names the file, the dotted field path and the value', () => {
    const path = tempFile('bad.json', { ...mixtral, attention: { type: 'GQA', heads: 32, kvHeads: 0, headDim: 128 } });
    const e = userError(() => loadModel(path));
    expect(e).toMatchObject({ file: path, field: 'attention.kvHeads', value: 0 });
    expect(e.oneLine()).toContain(`${path}: attention.kvHeads: `);
  });

  it('cross-field checks point at the offending array element', () => {
    const path = tempFile('bad-idx.json', {
      ...mixtral,
      layers: 4,
      moeLayers: 3,
      moeLayerIndices: [0, 2, 1],
      denseIntermediateSize: 100,
    });
    const e = userError(() => loadModel(path));
    expect(e).toMatchObject({ file: path, field: 'moeLayerIndices.2', value: 1 });
    expect(e.message).toMatch(/increasing/);
  });

  it('rejects unknown fields (strict objects)', () => {
    const path = tempFile('typo.json', { ...mixtral, hiddenSzie: 4096 });
    const e = userError(() => loadModel(path));
    expect(e.file).toBe(path);
    expect(e.field).toBe('hiddenSzie');
    expect(e.message).toMatch(/hiddenSzie/);
  });

  it('requires sources', () => {
    const path = tempFile('nosrc.json', { ...mixtral, sources: [] });
    expect(userError(() => loadModel(path))).toMatchObject({ field: 'sources' });
  });

  it('reports invalid JSON and missing files', () => {
    const path = tempFile('broken.json', '{ "id": ');
    expect(userError(() => loadModel(path)).message).toMatch(/^invalid JSON/);
    expect(userError(() => loadModel('/nonexistent/x.json')).message).toMatch(/cannot read file/);
  });

  it('a testbed with an unknown component id names the testbed file and field', () => {
    const testbed = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'testbeds', 'moe-gen-c1.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    const path = tempFile('tb.json', { ...testbed, gpu: 'rtx-a9000' });
    const e = userError(() => loadHardware(path));
    expect(e).toMatchObject({ file: path, field: 'gpu', value: 'rtx-a9000' });
    expect(e.message).toContain('rtx-a5000');
  });

  it('memory sizes stop at 1 PiB (2^20 GiB), where byte counts are still exact integers', () => {
    const testbed = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'testbeds', 'moe-gen-c1.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    // 2^20 GiB = 2^50 B: loads; one GiB more does not (a RangeError of the memory pool before).
    expect(loadHardware(tempFile('tb.json', { ...testbed, hostDramGiB: 2 ** 20 })).hostDramBytes).toBe(2 ** 50);
    const path = tempFile('tb.json', { ...testbed, hostDramGiB: 2 ** 20 + 1 });
    const e = userError(() => loadHardware(path));
    expect(e).toMatchObject({ file: path, field: 'hostDramGiB', value: 2 ** 20 + 1 });
    expect(e.message).toMatch(/at most 1048576 GiB/);
  });

  it('model shapes stay in range: 16384 experts, 1024 layers, widths of 2^20, and 1 PiB of weights', () => {
    const model = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'models', 'mixtral-8x7b.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    // 10^12 experts allocated per-expert tables until the allocation failed (exit 1).
    const many = tempFile('m.json', { ...model, experts: 2 ** 14 + 1 });
    expect(userError(() => loadModel(many))).toMatchObject({ file: many, field: 'experts', value: 2 ** 14 + 1 });
    const deep = tempFile('m.json', { ...model, layers: 1025, moeLayers: 1025 });
    expect(userError(() => loadModel(deep)).field).toBe('layers');
    // Every width in range, their product not: 32 layers × 8 experts × 3 × 2^20 × 2^20 × 2 B ≈ 1.7e15 B > 2^50.
    const wide = tempFile('m.json', { ...model, hiddenSize: 2 ** 20, expertIntermediateSize: 2 ** 20 });
    const e = userError(() => loadModel(wide));
    expect(e.file).toBe(wide);
    expect(e.message).toMatch(/^the weights come to 1\.[0-9]{2}e\+15 B, more than the 1 PiB/);
  });

  it('bytes per element stop at 16 and cores at 4096 (a typo of 10^12 sized pools and arrays past reach)', () => {
    const model = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'models', 'mixtral-8x7b.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    const dtypes = {
      expertBytesPerParam: 2,
      attentionBytesPerParam: 2,
      embeddingBytesPerParam: 2,
      kvBytesPerElement: 17,
    };
    const kv = tempFile('m.json', { ...model, dtypes });
    expect(userError(() => loadModel(kv))).toMatchObject({ field: 'dtypes.kvBytesPerElement', value: 17 });
    const cpu = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'cpus', 'desktop-16c.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    expect(loadCpu(tempFile('c.json', { ...cpu, cores: 4096 })).cores).toBe(4096);
    expect(userError(() => loadCpu(tempFile('c.json', { ...cpu, cores: 4097 })))).toMatchObject({
      field: 'cores',
      value: 4097,
    });
  });

  it('a testbed may reference a component file by path relative to itself', () => {
    const gpu = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'gpus', 'rtx-a5000.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    const gpuPath = tempFile('my-gpu.json', { ...gpu, id: 'my-gpu', kernelLaunchUs: 2 });
    const testbed = JSON.parse(readFileSync(resolve(PROFILES_DIR, 'testbeds', 'moe-gen-c1.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    const tbPath = join(gpuPath, '..', 'tb.json');
    writeFileSync(tbPath, JSON.stringify({ ...testbed, id: 'mine', gpu: './my-gpu.json' }));
    expect(loadHardware(tbPath).gpu).toMatchObject({ id: 'my-gpu', kernelLaunchNs: 2000 });
  });
});
