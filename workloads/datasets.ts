/**
 * Prompt and output length distributions of the datasets named in DESIGN §6.
 *
 * Each length is a truncated log-normal given by its mean, coefficient of variation and
 * bounds (`lengths.ts` solves for the log-normal whose *truncated* mean is the stated mean), or
 * a fixed value. `source` says where each number comes from; `estimated: true` marks numbers
 * that are our estimates (no measured distribution was available here) — replace them with
 * measured ones (or replay a request log) when precision matters.
 */

export interface LengthShape {
  readonly meanTokens: number;
  readonly cv: number;
  readonly min: number;
  readonly max: number;
}

export type DatasetLength = LengthShape | { readonly fixed: number };

export interface DatasetSpec {
  readonly title: string;
  readonly prompt: DatasetLength;
  readonly output: DatasetLength;
  readonly source: string;
  readonly estimated: boolean;
}

export const DATASETS = {
  mmlu: {
    title: 'MMLU (zero-shot multiple choice)',
    prompt: { meanTokens: 100, cv: 0.8, min: 20, max: 1000 },
    output: { fixed: 1 },
    source:
      'Hendrycks et al., "Measuring Massive Multitask Language Understanding" (ICLR 2021): a question plus 4 choices; ' +
      'prompt length estimated for zero-shot prompts; 1 output token (the answer letter) as DESIGN §6 states',
    estimated: true,
  },
  gsm8k: {
    title: 'GSM8K (grade-school math, chain-of-thought answer)',
    prompt: { meanTokens: 70, cv: 0.35, min: 20, max: 250 },
    output: { meanTokens: 124, cv: 0.45, min: 16, max: 512 },
    source:
      'Cobbe et al., "Training Verifiers to Solve Math Word Problems" (2021); question length estimated (zero-shot, no few-shot ' +
      'exemplars); output mean 124 = the two GSM8K requests of ../shared/traces/real/mixtral-8x7b-fp8_speculative-moe.jsonl.gz ' +
      '(Mixtral-8x7B-Instruct, greedy) decoded 168 and 79 tokens',
    estimated: true,
  },
  'chatbot-arena': {
    title: 'ChatBot Arena conversations (LMSYS-Chat-1M)',
    prompt: { meanTokens: 69.5, cv: 2.0, min: 1, max: 4096 },
    output: { meanTokens: 214.5, cv: 1.0, min: 1, max: 2048 },
    source:
      'Zheng et al., "LMSYS-Chat-1M: A Large-Scale Real-World LLM Conversation Dataset" (ICLR 2024): mean 69.5 tokens per ' +
      'prompt and 214.5 per response; spreads (cv) and bounds estimated',
    estimated: false,
  },
  'mt-bench': {
    title: 'MT-Bench (multi-turn chat questions)',
    prompt: { meanTokens: 98, cv: 0.9, min: 10, max: 450 },
    output: { meanTokens: 200, cv: 0.5, min: 16, max: 1024 },
    source:
      'prompt mean ~98 tokens, max 450, as used by MoE-Lens (DESIGN §6); Zheng et al., "Judging LLM-as-a-Judge with ' +
      'MT-Bench and Chatbot Arena" (NeurIPS 2023); output length estimated (MoE-Lens caps generation at 32–256: use max)',
    estimated: false,
  },
  rag: {
    title: 'RAG (retrieval-augmented prompts)',
    prompt: { meanTokens: 926, cv: 0.4, min: 200, max: 1843 },
    output: { meanTokens: 128, cv: 0.5, min: 16, max: 512 },
    source: 'prompt mean ~926 tokens, max 1843, as used by MoE-Lens (DESIGN §6); output length estimated',
    estimated: false,
  },
  aime: {
    title: 'AIME (competition math, long reasoning outputs)',
    prompt: { meanTokens: 128, cv: 0.4, min: 40, max: 400 },
    output: { meanTokens: 8192, cv: 0.6, min: 512, max: 32768 },
    source:
      'prompt ~128 tokens with long outputs, as used by MoE-Lens (DESIGN §6); the output distribution is assumed ' +
      '(reasoning models write thousands of tokens per problem)',
    estimated: true,
  },
  longbench: {
    title: 'LongBench (long-context understanding)',
    prompt: { meanTokens: 8700, cv: 0.6, min: 1000, max: 32000 },
    output: { meanTokens: 100, cv: 1.0, min: 8, max: 512 },
    source:
      'Bai et al., "LongBench" (ACL 2024): English tasks average ~6,700 words, here ×1.3 tokens per word; bounds assumed ' +
      '(LongBench truncates inputs to the model window); outputs are short task answers (estimated)',
    estimated: true,
  },
  flan: {
    title: 'FLAN (instruction-tuning task mixture)',
    prompt: { meanTokens: 120, cv: 1.0, min: 10, max: 1024 },
    output: { meanTokens: 30, cv: 1.0, min: 1, max: 256 },
    source:
      'Wei et al. / Longpre et al., FLAN collection (2021/2023): short templated inputs and answers; lengths estimated',
    estimated: true,
  },
  'big-bench': {
    title: 'BIG-bench (diverse reasoning tasks)',
    prompt: { meanTokens: 180, cv: 1.0, min: 10, max: 2048 },
    output: { meanTokens: 20, cv: 1.2, min: 1, max: 256 },
    source:
      'Srivastava et al., "Beyond the Imitation Game" (2022): mostly short prompts and answers; lengths estimated',
    estimated: true,
  },
} as const satisfies Record<string, DatasetSpec>;

export type DatasetName = keyof typeof DATASETS;
export const DATASET_NAMES = Object.keys(DATASETS) as DatasetName[];

export const isDatasetName = (s: string): s is DatasetName => Object.hasOwn(DATASETS, s);

/** Aliases accepted in configs (case-insensitive): `bigbench`, `big_bench`, `mtbench`, `arena`, `lmsys` ... */
export function resolveDatasetName(s: string): DatasetName | undefined {
  const n = s.toLowerCase().replace(/_/g, '-');
  if (isDatasetName(n)) return n;
  const aliases: Record<string, DatasetName> = {
    bigbench: 'big-bench',
    mtbench: 'mt-bench',
    arena: 'chatbot-arena',
    chatbotarena: 'chatbot-arena',
    lmsys: 'chatbot-arena',
    'lmsys-chat-1m': 'chatbot-arena',
    'long-bench': 'longbench',
  };
  return aliases[n.replace(/-/g, '')] ?? aliases[n];
}
