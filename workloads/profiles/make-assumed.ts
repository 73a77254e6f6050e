/**
 * Writes the synthetic profiles of the models that the papers use and that have neither a
 * routing trace nor published summary statistics here (now only Qwen1.5-MoE), from the fitted
 * profiles by stated rules, so every number in them can be traced:
 *
 *   npx tsx workloads/profiles/make-assumed.ts
 *
 * Rules:
 * - Popularity: the mean Zipf exponent of the donor named per knob, the same at every layer;
 *   expert ranks random (from `structureSeed`).
 * - `requestConcentration` keeps the donor's concentration *per expert* (β_R / E), so a request
 *   is as peaked over a 128-expert layer as it is over the donor's experts.
 * - Temporal and cross-layer knobs: from the donor with the same (or nearest) top-k.
 * - `taskConcentration`: from the OLMoE aggregates (five corpora as tasks), the only data here
 *   on how much tasks differ; `startTokens` 1 for decoder-only chat models (BOS), 0 otherwise.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadProfile, PROFILES_DIR, type Profile } from '../synthetic/profile.ts';
import { formatJson } from '../stats/format.ts';

const mean = (a: number | number[]): number => (Array.isArray(a) ? a.reduce((x, y) => x + y, 0) / a.length : a);
const r4 = (x: number): number => Math.round(x * 1e4) / 1e4;

interface Spec {
  readonly name: string;
  readonly id: string;
  readonly title: string;
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
  /** Donor of popularity, of request concentration, and of temporal/cross-layer/shared-token knobs. */
  readonly popularityFrom: Profile;
  readonly requestFrom: Profile;
  readonly temporalFrom: Profile;
  readonly startTokens: number;
  readonly lengths: NonNullable<Profile['lengths']>;
  readonly tasks?: Record<string, number>;
  readonly why: string;
}

async function main(): Promise<void> {
  const ds = (await loadProfile('deepseek-v2-lite')).profile;
  const ol = (await loadProfile('olmoe')).profile;
  const specs: Spec[] = [
    {
      name: 'qwen1.5-moe',
      id: 'qwen1.5-moe-a2.7b',
      title: 'Qwen1.5-MoE-A2.7B (24 MoE layers, 60 routed experts, top-4, 4 shared)',
      moeLayers: 24,
      experts: 60,
      topK: 4,
      popularityFrom: ds,
      requestFrom: ds,
      temporalFrom: ds,
      startTokens: 1,
      lengths: {
        prompt: { kind: 'dataset', name: 'chatbot-arena' },
        output: { kind: 'dataset', name: 'chatbot-arena' },
      },
      why: 'fine-grained routed experts plus shared experts, the same design as DeepSeek-V2-Lite',
    },
  ];
  for (const s of specs) {
    const donorE = (p: Profile): number => p.model.experts;
    const betaR = s.requestFrom.knobs.requestConcentration;
    const t = s.temporalFrom.knobs;
    const profile: Profile = {
      name: s.name,
      description: s.title,
      model: { id: s.id, moeLayers: s.moeLayers, experts: s.experts, topK: s.topK },
      assumedFrom:
        `no routing trace of this model is available here; knobs assumed by workloads/profiles/make-assumed.ts: ` +
        `popularity = mean Zipf exponent of "${s.popularityFrom.name}"; requestConcentration = "${s.requestFrom.name}"'s per expert ` +
        `(×${s.experts}/${donorE(s.requestFrom)}); temporal, cross-layer and shared-token knobs of "${s.temporalFrom.name}" ` +
        `(top-${s.temporalFrom.model.topK}); taskConcentration of "${ol.name}" (OLMoE aggregates, corpora as tasks); ` +
        `lengths and tasks: ${s.why}`,
      knobs: {
        popularity: { zipfExponent: r4(mean(s.popularityFrom.knobs.popularity.zipfExponent)) },
        requestConcentration: betaR === null ? null : r4((betaR * s.experts) / donorE(s.requestFrom)),
        temporalReuse: t.temporalReuse,
        temporalDepth: t.temporalDepth,
        temporalMemory: t.temporalMemory,
        crossLayer: t.crossLayer,
        sharedTokens: t.sharedTokens,
        sharedVocabulary: t.sharedVocabulary,
        startTokens: s.startTokens,
        taskConcentration: ol.knobs.taskConcentration,
        latentClusters: 16,
        clusterConcentration: null,
        structureSeed: 1,
      },
      ...(s.tasks ? { tasks: s.tasks } : {}),
      lengths: s.lengths,
    };
    writeFileSync(join(PROFILES_DIR, `${s.name}.json`), `${formatJson(profile)}\n`);
    process.stdout.write(`wrote ${s.name}.json\n`);
  }
}

await main();
