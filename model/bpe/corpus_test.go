package bpe

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// corpus returns about n bytes of mixed text, the same for the same seed: English prose,
// numbers, Chinese, code, agent-protocol turns in ChatML, and runs of whitespace.
func corpus(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	words := strings.Fields(`the of and to in a is that for it as was with be by on not he this are or his
		from at which but have an they you were her she there been one all we their has would when
		what who more if no out so said up its about into than them can only other new some could
		time these two may then do first any my now such like our over man me even most made after
		also did many before must through back years where much your way well down should because
		each just those people how too little state good very make world still own see men work long
		get here between both life being under never day same another know while last might us great
		old year off come since against go came right used take three capital river born film album
		director population country author novel mountain university founded war president city`)
	chinese := []rune("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴")
	code := []string{
		"func (t *Tokenizer) Encode(s string) []int32 {\n\treturn nil\n}\n",
		"for i := 0; i < n; i++ {\n\tsum += x[i] * y[i]\n}\n",
		"def score(pred, gold):\n    return 2 * p * r / (p + r)\n",
		`{"question": "who wrote it?", "answer": ["A", "B"], "k": 2}` + "\n",
		"if err != nil {\n\treturn fmt.Errorf(\"read %s: %w\", path, err)\n}\n",
	}
	tags := [][2]string{{"<think>", "</think>"}, {"<mem>", "</mem>"}, {"<search>", "</search>"},
		{"<answer>", "</answer>"}, {"<information>", "</information>"}}
	var b strings.Builder
	sentence := func() {
		k := 4 + r.IntN(12)
		for i := 0; i < k; i++ {
			w := words[r.IntN(len(words))]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			} else {
				b.WriteByte(' ')
			}
			b.WriteString(w)
			if r.IntN(20) == 0 {
				b.WriteString(", ")
				b.WriteString(strconv.Itoa(r.IntN(3000)))
			}
		}
		b.WriteString([]string{".", ".", ".", "?", "!", ";"}[r.IntN(6)])
	}
	for b.Len() < n {
		switch r.IntN(10) {
		case 0, 1, 2, 3:
			sentence()
			b.WriteString([]string{" ", " ", "\n", "\n\n", "  "}[r.IntN(5)])
		case 4:
			k := 5 + r.IntN(30)
			for i := 0; i < k; i++ {
				b.WriteRune(chinese[r.IntN(len(chinese))])
			}
			b.WriteString([]string{"。", "，", "！", "\n"}[r.IntN(4)])
		case 5:
			b.WriteString(code[r.IntN(len(code))])
		case 6, 7:
			t := tags[r.IntN(len(tags))]
			b.WriteString(t[0])
			sentence()
			b.WriteString(t[1])
			b.WriteByte('\n')
		case 8:
			b.WriteString(ImStart + "user\n")
			sentence()
			b.WriteString(ImEnd + "\n" + ImStart + "assistant\n")
		case 9:
			b.WriteString([]string{"\t", "    ", "\n\n\n", " \n", "😀 ", "🎉🎉 ", "1999-2024 ", "3.14159 "}[r.IntN(8)])
		}
	}
	return b.String()
}

// corpusLines splits corpus(seed, n) into lines, the shape Train usually gets.
func corpusLines(seed uint64, n int) []string {
	return strings.SplitAfter(corpus(seed, n), "\n")
}
