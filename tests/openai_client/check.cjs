// Calls an actord server with the official `openai` npm client and checks what comes back.
// Usage: NODE_PATH=<dir with node_modules/openai> node check.cjs BASE_URL API_KEY MODEL
// Prints one line per check; exits 1 at the first failure (with what was expected and got).
const OpenAI = require('openai');
const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

function check(name, ok, detail) {
  if (!ok) {
    console.log(`FAIL ${name}: ${detail === undefined ? '' : JSON.stringify(detail)}`);
    process.exit(1);
  }
  console.log(`ok ${name}`);
}

async function main() {
  const models = await client.models.list();
  check('models list the served model', models.data.length === 1 && models.data[0].id === model, models.data);

  const greedy = { model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 };
  const c = await client.completions.create(greedy);
  check('completion text', typeof c.choices[0].text === 'string' && c.choices[0].text.length > 0, c);
  check('completion finish_reason length', c.choices[0].finish_reason === 'length', c.choices[0]);
  check('completion usage', c.usage.completion_tokens === 12 && c.usage.prompt_tokens > 0 &&
        c.usage.total_tokens === c.usage.prompt_tokens + 12, c.usage);
  check('system_fingerprint', typeof c.system_fingerprint === 'string', c.system_fingerprint);

  const stream = await client.completions.create({ ...greedy, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  check('streamed completion equals the plain one', text === c.choices[0].text, { text, plain: c.choices[0].text });
  check('stream finish_reason and usage', finish === 'length' && usage && usage.completion_tokens === 12, { finish, usage });

  const seeded = { model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0.9, seed: 42, n: 2 };
  const a = await client.completions.create(seeded);
  const b = await client.completions.create(seeded);
  check('n=2 gives two choices', a.choices.length === 2 && a.choices[1].index === 1, a.choices);
  check('a seed reproduces the samples', a.choices.map(x => x.text).join('|') === b.choices.map(x => x.text).join('|'),
        [a.choices, b.choices]);

  const lp = await client.completions.create({ ...greedy, max_tokens: 4, logprobs: 2 });
  const l = lp.choices[0].logprobs;
  check('completion logprobs shape', l.tokens.length === 4 && l.token_logprobs.length === 4 &&
        l.top_logprobs.length === 4 && Object.keys(l.top_logprobs[0]).length <= 2 && l.text_offset[0] === 0, l);

  // Token texts as the text reads them: the leading space kept, tokens adding up to the text, offsets into it.
  const spaced = await client.completions.create({ ...greedy, prompt: 'Once upon a time,', max_tokens: 6, logprobs: 1 });
  const st = spaced.choices[0];
  check('completion keeps the first token\'s leading space', st.text.startsWith(' '), st.text);
  check('logprobs tokens add up to the text', st.logprobs.tokens.join('') === st.text, st.logprobs.tokens);
  check('text_offset indexes the text', st.logprobs.tokens.every((t, i) => st.text.startsWith(t, st.logprobs.text_offset[i])),
        st.logprobs.text_offset);
  const spacedEcho = await client.completions.create({ ...greedy, prompt: 'Once upon a time,', max_tokens: 6, echo: true });
  check('echo is the prompt and the completion', spacedEcho.choices[0].text === 'Once upon a time,' + st.text,
        spacedEcho.choices[0].text);

  // logit_bias: +100 forces a token at every step, -100 keeps it away.
  const forced = await client.completions.create({ ...greedy, max_tokens: 4, logprobs: 0, logit_bias: { '300': 100 } });
  const ft = forced.choices[0].logprobs.tokens;
  check('logit_bias +100 forces the token', ft.length === 4 && ft.every(t => t === ft[0]), ft);
  const bannedTok = await client.completions.create({ ...greedy, max_tokens: 8, logprobs: 0, logit_bias: { '300': -100 } });
  check('logit_bias -100 bans the token', !bannedTok.choices[0].logprobs.tokens.includes(ft[0]), bannedTok.choices[0].logprobs);

  // JSON mode: with "}" favoured the object closes, and the reply parses as one.
  const jsonMode = await client.completions.create({ ...greedy, max_tokens: 40, logit_bias: { '128': 10 },
                                                     response_format: { type: 'json_object' } });
  const jm = jsonMode.choices[0];
  let parsed = null;
  try { parsed = JSON.parse(jm.text); } catch (e) { parsed = null; }
  check('json_object gives a JSON object', jm.finish_reason === 'stop' && parsed !== null && typeof parsed === 'object' &&
        !Array.isArray(parsed), jm);

  // Structured outputs: the reply is an object of the schema, its properties in the schema's order, the integer
  // within its bounds, the date a date (what pydantic writes for int = Field(ge=1, le=900) and datetime.date).
  const schema = { type: 'object', properties: { title: { type: 'string', maxLength: 12 },
                   pages: { type: 'integer', minimum: 1, maximum: 900 }, genre: { enum: ['fairy tale', 'fable'] },
                   published: { type: 'string', format: 'date' } },
                   required: ['title', 'pages', 'genre', 'published'], additionalProperties: false };
  const structured = await client.chat.completions.create({ model, max_tokens: 200, temperature: 0.7, seed: 3,
    messages: [{ role: 'user', content: 'A story' }],
    response_format: { type: 'json_schema', json_schema: { name: 'book', strict: true, schema } } });
  const so = structured.choices[0];
  let book = null;
  try { book = JSON.parse(so.message.content); } catch (e) { book = null; }
  check('json_schema gives an object of the schema', so.finish_reason === 'stop' && book !== null &&
        JSON.stringify(Object.keys(book)) === '["title","pages","genre","published"]' && Number.isInteger(book.pages) &&
        book.pages >= 1 && book.pages <= 900 && book.title.length <= 12 && ['fairy tale', 'fable'].includes(book.genre) &&
        /^\d{4}-\d{2}-\d{2}$/.test(book.published) && !isNaN(Date.parse(book.published)), so);

  const echo = await client.completions.create({ ...greedy, max_tokens: 3, echo: true });
  check('echo starts with the prompt', echo.choices[0].text.startsWith('Once upon a time'), echo.choices[0]);

  const stopped = await client.completions.create({ ...greedy, max_tokens: 40, stop: [' was'] });
  check('stop string', stopped.choices[0].finish_reason === 'stop' && !stopped.choices[0].text.includes(' was'),
        stopped.choices[0]);

  const messages = [{ role: 'user', content: 'Tell me a story' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0,
                                                      logprobs: true, top_logprobs: 2 });
  check('chat message', chat.choices[0].message.role === 'assistant' && typeof chat.choices[0].message.content === 'string',
        chat.choices[0]);
  check('chat logprobs shape', chat.choices[0].logprobs.content.length === 10 &&
        chat.choices[0].logprobs.content[0].top_logprobs.length === 2 &&
        Array.isArray(chat.choices[0].logprobs.content[0].bytes), chat.choices[0].logprobs.content[0]);
  const chatStream = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, stream: true });
  let chatText = '', role = null;
  for await (const chunk of chatStream) {
    const delta = chunk.choices[0]?.delta || {};
    if (delta.role) role = delta.role;
    if (delta.content) chatText += delta.content;
  }
  check('streamed chat equals the plain one', role === 'assistant' && chatText === chat.choices[0].message.content,
        { chatText, plain: chat.choices[0].message.content });

  // Tool calling: the template renders the tools; stories260K cannot choose to call one, so the constrained choices
  // (a named function, required) are what reaches a tool call here; auto leaves its text as content.
  const tools = [
    { type: 'function', function: { name: 'add', description: 'Adds two integers', parameters: { type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } } },
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
      properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } }, required: ['city'] } } },
  ];
  const validCall = (c) => {
    const args = JSON.parse(c.function.arguments);
    if (c.function.name === 'add') return Number.isInteger(args.a) && Number.isInteger(args.b) && Object.keys(args).length === 2;
    return c.function.name === 'get_weather' && typeof args.city === 'string' && args.city.length <= 12 &&
      (args.unit === undefined || ['c', 'f'].includes(args.unit));
  };
  const named = await client.chat.completions.create({ model, messages, tools, max_tokens: 60, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'add' } } });
  const nc = named.choices[0];
  check('a named tool choice gives that call', nc.message.content === null && nc.message.tool_calls.length === 1 &&
        nc.message.tool_calls[0].type === 'function' && nc.message.tool_calls[0].id.startsWith('call_') &&
        nc.message.tool_calls[0].function.name === 'add' && validCall(nc.message.tool_calls[0]) &&
        nc.finish_reason === 'stop', nc);
  // stories260K would go on adding calls to the list until its context ends: a bias on ']' (id 509 in its
  // vocabulary; the schema allows it only after a whole call) closes the list after its first call.
  const required = await client.chat.completions.create({ model, messages, tools, max_tokens: 300, temperature: 1,
    seed: 3, tool_choice: 'required', logit_bias: { 509: 100 } });
  const rc = required.choices[0];
  check('tool_choice required gives valid calls', rc.finish_reason === 'stop' && rc.message.tool_calls.length >= 1 &&
        rc.message.tool_calls.every(validCall), rc);
  const single = await client.chat.completions.create({ model, messages, tools, max_tokens: 120, temperature: 1,
    seed: 5, tool_choice: 'required', parallel_tool_calls: false });
  check('parallel_tool_calls false gives one call', single.choices[0].message.tool_calls.length === 1 &&
        validCall(single.choices[0].message.tool_calls[0]), single.choices[0]);
  // Streamed: the client's accumulation of tool_calls deltas gives the same call.
  const toolStream = client.beta.chat.completions.stream({ model, messages, tools, max_tokens: 60, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'add' } } });
  const streamed = await toolStream.finalChatCompletion();
  const sc = streamed.choices[0].message.tool_calls || [];
  check('a streamed tool call accumulates to the plain one', sc.length === 1 && sc[0].function.name === 'add' &&
        sc[0].function.arguments === nc.message.tool_calls[0].function.arguments, streamed.choices[0]);
  const auto = await client.chat.completions.create({ model, messages, tools, max_tokens: 10, temperature: 0 });
  check('tool_choice auto without a call is plain content', typeof auto.choices[0].message.content === 'string' &&
        !auto.choices[0].message.tool_calls && auto.choices[0].finish_reason === 'length', auto.choices[0]);
  // A conversation with the call and its result goes back to the model.
  const followUp = await client.chat.completions.create({ model, max_tokens: 5, temperature: 0, tools, messages: [
    ...messages, nc.message, { role: 'tool', tool_call_id: nc.message.tool_calls[0].id, content: '5' }] });
  check('a tool result continues the conversation', typeof followUp.choices[0].message.content === 'string', followUp.choices[0]);

  for (const [name, body, param] of [
    ['an unknown tool choice', { model, messages, tools, tool_choice: { type: 'function', function: { name: 'mul' } } },
      'tool_choice'],
    ['a tool with a bad name', { model, messages, tools: [{ type: 'function', function: { name: 'a b' } }] }, 'tools'],
  ]) {
    try {
      await client.chat.completions.create(body);
      check(`${name} is refused`, false, 'no error');
    } catch (e) {
      check(`${name} is refused with 400 naming ${param}`, e.status === 400 && e.param === param, { status: e.status, param: e.param, message: e.message });
    }
  }

  for (const [name, body, param] of [
    ['temperature -1', { ...greedy, temperature: -1 }, 'temperature'],
    ['n 0', { ...greedy, n: 0 }, 'n'],
    ['top_p 2', { ...greedy, top_p: 2 }, 'top_p'],
    ['a schema with multipleOf', { ...greedy, response_format: { type: 'json_schema', json_schema: { name: 'z',
      schema: { type: 'object', properties: { even: { type: 'integer', multipleOf: 2 } } } } } }, 'response_format'],
  ]) {
    try {
      await client.completions.create(body);
      check(`${name} is refused`, false, 'no error');
    } catch (e) {
      check(`${name} is refused with 400 naming ${param}`, e.status === 400 && e.param === param, { status: e.status, param: e.param, message: e.message });
    }
  }
  try {
    await client.completions.create({ ...greedy, model: 'no-such-model' });
    check('an unknown model is refused', false, 'no error');
  } catch (e) {
    check('an unknown model is refused with 404', e.status === 404, { status: e.status, message: e.message });
  }
  const wrongKey = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  try {
    await wrongKey.completions.create(greedy);
    check('a wrong key is refused', false, 'no error');
  } catch (e) {
    check('a wrong key is refused with 401', e.status === 401, { status: e.status });
  }
  console.log('all checks passed');
}

main().catch(e => { console.log(`FAIL exception: ${e.stack || e}`); process.exit(1); });
